"""Overview pages: what a person sees across projects, jobs, budgets and clusters at once — the dashboard, the
projects and a project's page, and the site admin's page. They read several apps, so they live above all of them
(no models of their own); each app's own pages stay in the app.
"""
