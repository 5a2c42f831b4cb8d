from django.apps import AppConfig


class BudgetsConfig(AppConfig):
    name = "portal.budgets"
    label = "budgets"
