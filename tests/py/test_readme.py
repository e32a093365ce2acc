"""The README's first example runs as shown (doctest over the README's Python session)."""
import doctest
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_readme_python_session(monkeypatch):
    monkeypatch.chdir(ROOT)
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        text = f.read()
    sessions = "\n\n".join(re.findall(r"```python\n(.*?)```", text, flags=re.S))
    parser = doctest.DocTestParser()
    test = parser.get_doctest(sessions, {}, "README.md", "README.md", 0)
    assert test.examples, "the README has no Python session"
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    runner.run(test)
    assert runner.failures == 0, "the README's Python session does not run as shown"
