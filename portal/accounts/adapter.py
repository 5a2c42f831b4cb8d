from allauth.account.adapter import DefaultAccountAdapter

from portal.accounts.models import SiteSettings


class AccountAdapter(DefaultAccountAdapter):
    def is_open_for_signup(self, request) -> bool:
        return SiteSettings.current().signup_open
