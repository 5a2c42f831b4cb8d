"""Kakehashi for JupyterLab: "Submit notebook as job" (the Lab frontend) and the handler on the user's own Jupyter
server that forwards the notebook to the portal with the server's hub token."""

__version__ = "0.1.0"


def _jupyter_labextension_paths():
    return [{"src": "labextension", "dest": "kakehashi-lab"}]


def _jupyter_server_extension_points():
    return [{"module": "kakehashi_lab"}]


def _load_jupyter_server_extension(server_app):
    from kakehashi_lab.handlers import setup_handlers

    setup_handlers(server_app)
