"""A resource's probe (docs/guide/resources.md, "Live counts"): a fake ``lmstat`` whose output
lowers the limit, and which can fail, hang or print garbage."""

import json
import os
import stat
import sys

import pytest

from dcc_flow import Engine, InvalidRequestError
from dcc_flow._cli import main

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="the fake lmstat is a shell script")

FAKE = """#!/bin/sh
dir=$(dirname "$0")
case $(cat "$dir/mode") in
ok) echo "Users of houdini:  (Total of 10 licenses issued;  Total of 7 licenses in use)";;
fail) echo "lmgrd is not running" >&2; exit 1;;
hang) exec sleep 600;;
garbage) echo "%%% not lmstat";;
esac
"""


def fake_lmstat(tmp_path, mode):
    script = tmp_path / "lmstat"
    script.write_text(FAKE)
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    (tmp_path / "mode").write_text(mode)
    return str(script)


def config(script, **probe):
    return {"resources": {"houdini": {"limit": 4, "probe": dict({"command": [script, "-f", "houdini"], "parser": "lmstat"},
                                                                **probe)}}}


@pytest.mark.parametrize("mode, state, effective, error", [
    ("ok", "ok", 3, None),
    ("fail", "failed", 4, "lmgrd is not running"),
    ("garbage", "failed", 4, "output not understood"),
    ("hang", "failed", 4, "timed out after 1s"),
])
def test_engine_resources_show_the_probe(tmp_path, mode, state, effective, error):
    script = fake_lmstat(tmp_path, mode)
    with Engine(config=config(script, timeout_secs=1, every_secs=60)) as engine:  # the first run is done when it opens
        (r,) = engine.resources()
    probe = r["probe"]
    assert (probe["state"], probe["effective_limit"], probe["every_secs"]) == (state, effective, 60)
    assert r["limit"] == 4
    if error:
        assert error in probe["error"] and "free" not in probe
    else:
        assert probe["free"] == 3 and "error" not in probe


def test_a_bad_probe_config_names_the_field(tmp_path):
    with pytest.raises(InvalidRequestError) as exc:
        Engine(config={"resources": {"houdini": {"limit": 4, "probe": {"command": ["lmutil"], "parser": "regex"}}}})
    assert "resources.houdini.probe.regex: must be a regular expression with one capture group" in str(exc.value)


def test_cli_resources_file_with_a_probe(tmp_path, capsys):
    script = fake_lmstat(tmp_path, "ok")
    path = tmp_path / "resources.json"
    path.write_text(json.dumps(config(script)))
    assert main(["resources", "--resources", str(path), "--db", str(tmp_path / "flow.db")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "houdini: 0 of 4 in use, 0 waiting"
    assert out[1].startswith("  probe  ok: 3 free, effective limit 3 (every 30 s, checked ")
    (tmp_path / "mode").write_text("fail")
    assert main(["resources", "--resources", str(path), "--resource", "houdini=2", "--json",
                 "--db", str(tmp_path / "flow.db")]) == 0
    (r,) = json.loads(capsys.readouterr().out)
    assert (r["limit"], r["probe"]["state"], r["probe"]["effective_limit"]) == (2, "failed", 2)


@pytest.mark.parametrize("content, message", [
    ("not json", "not JSON"),
    ("[1]", "expected a JSON object of resources by name"),
])
def test_cli_resources_file_errors(tmp_path, capsys, content, message):
    path = tmp_path / "resources.json"
    path.write_text(content)
    assert main(["resources", "--resources", str(path), "--db", str(tmp_path / "flow.db")]) == 1
    assert message in capsys.readouterr().err
    assert os.path.exists(str(path))


def test_cli_resource_option_sets_one_limit_of_the_config_files_resources():
    """``--config FILE``'s resources stay, probes included, under ``--resource NAME=LIMIT`` (it set
    one limit; it replaced them all); ``--resources FILE`` replaces them."""
    import argparse

    from dcc_flow._cli._resources import resources_config

    base = {"houdini": {"limit": 4, "probe": {"command": ["lmutil"], "parser": "lmstat"}}, "gpu": {"limit": 2}}
    args = argparse.Namespace(resources=["houdini=2", "nuke=10"], resources_file=None)
    assert resources_config(args, base) == {
        "houdini": {"limit": 2, "probe": {"command": ["lmutil"], "parser": "lmstat"}},
        "gpu": {"limit": 2}, "nuke": {"limit": 10}}
    assert base["houdini"]["limit"] == 4  # the config itself is not changed
    assert resources_config(argparse.Namespace(resources=[], resources_file=None), base) is None
