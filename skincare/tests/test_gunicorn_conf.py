"""gunicorn as ``make run`` serves it (config/gunicorn.conf.py), started for real."""

import pytest

from devtools.processes import ROOT, Gunicorn
from skincare.tests.test_metrics import _url as database_url_for_children

# The project's configuration with gunicorn's default control socket put back (the control).
WITH_CONTROL_SOCKET = f"""
import runpy
globals().update(
    {{k: v for k, v in runpy.run_path("{ROOT / "config" / "gunicorn.conf.py"}").items() if not k.startswith("__")}}
)
control_socket_disable = False
"""


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("conf", ["project", "control-gunicorns-default"])
def test_an_instance_opens_no_control_socket(tmp_path, conf):
    """gunicorn's control socket (gunicornc) is off: no instance binds one, so two on a host never share its default
    path and nobody resizes or stops a server through it. Control: with gunicorn's default, the master binds it."""
    home = tmp_path / "home"
    home.mkdir()
    config = None
    if conf != "project":
        config = tmp_path / "gunicorn.conf.py"
        config.write_text(WITH_CONTROL_SOCKET)
    env = {"HOME": str(home), "XDG_RUNTIME_DIR": "", "ACCESS_LOG": "false"}
    with Gunicorn(database_url_for_children(), workers=1, config=config and str(config), extra_env=env) as web:
        assert "Using worker: gthread" in web.log_path.read_text()
        bound = (home / ".gunicorn" / "gunicorn.ctl").exists()
    assert bound == (conf != "project"), web.log_path.read_text()
