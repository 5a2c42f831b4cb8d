"""Usage: what projects spend while their jobs run, and what they spent.

The burn of running jobs, strict budgets enforced by cancelling (docs/decisions/0006), alerts at 50/80/100 %,
reminders of forgotten jobs, and the usage pages with their charts and CSV. It reads jobs and budgets and acts
through their actions, so it sits above both (no models of its own).
"""
