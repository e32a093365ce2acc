"""The rules the package repeats from Go, checked against the golden table Go's tests also read.

testdata/golden/shared_rules.json is written by Go (``go test ./engine/spec -run TestSharedRules
-update``) and checked by engine/spec and engine/run; here the Python copies must give the same
answers: canonical JSON (``_json.go_json``), retry delays and retryable kinds (``RetryPolicy``), and
the name rules of the code-first compiler (``dcc_flow._flow._base``). A change on either side that
makes them differ fails one of the tests.
"""

import json
import os

import pytest

from conftest import ROOT
from dcc_flow import RetryPolicy
from dcc_flow._flow._base import _ID, _RESERVED, _TOOL_NAME
from dcc_flow._json import go_json, loads_go

with open(os.path.join(ROOT, "testdata", "golden", "shared_rules.json"), encoding="utf-8") as _fh:
    RULES = json.load(_fh)


def _label(case):
    return json.dumps(case, ensure_ascii=True)[:80]


def test_every_section_has_cases():
    for section in ("canonical_json", "retry_delay_ms", "retryable", "names"):
        assert len(RULES[section]) >= 10, section


@pytest.mark.parametrize("case", RULES["canonical_json"], ids=_label)
def test_canonical_json_matches_go(case):
    # The same value decoded in Python encodes to Go's bytes, and Go's output read back as the
    # package reads library output (loads_go) is a fixed point: what sha256(spec.to_json()) ==
    # spec_hash relies on.
    assert go_json(loads_go(case["in"])) == case["out"]
    assert go_json(loads_go(case["out"])) == case["out"]


@pytest.mark.parametrize("case", RULES["retry_delay_ms"], ids=_label)
def test_retry_delay_matches_go(case):
    policy = RetryPolicy(2, backoff=case["backoff"], initial_delay_ms=case["initial_delay_ms"],
                         max_delay_ms=case["max_delay_ms"], multiplier=case.get("multiplier"))
    assert policy.next_delay_ms(case["attempt"]) == case["delay_ms"]


@pytest.mark.parametrize("case", RULES["retryable"], ids=_label)
def test_retryable_matches_go(case):
    policy = RetryPolicy(2, retry_on=case["retry_on"])
    assert policy.is_retryable(case["kind"]) is case["retryable"]


@pytest.mark.parametrize("case", RULES["names"], ids=_label)
def test_name_rules_match_go(case):
    name = case["name"]
    assert (_TOOL_NAME.match(name) is not None) is case["tool_name"]
    assert (_ID.match(name) is not None) is case["id"]
    assert (name in _RESERVED) is case["reserved"]
