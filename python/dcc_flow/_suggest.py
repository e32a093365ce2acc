""""Did you mean" for names typed by hand that the engine cannot find: files in this module;
tool and workflow names are suggested by the engine itself (its messages and ``details``)."""
import difflib
import os
from typing import Optional


def closest_file(path: str) -> Optional[str]:
    """The path of the file in ``path``'s folder whose name is closest to its base name (a typo
    such as ``exprot.yaml`` for ``export.yaml``), or None when none is close or the folder cannot
    be listed."""
    folder, base = os.path.split(path)
    stem, ext = os.path.splitext(base)
    try:
        names = sorted(os.listdir(folder or "."))
    except OSError:
        return None
    # Stems of the files with the same extension: "gone.yaml" is not a typo of "good.yaml".
    stems = {os.path.splitext(n)[0]: n for n in names if os.path.splitext(n)[1].lower() == ext.lower()}
    close = difflib.get_close_matches(stem, list(stems), n=1, cutoff=0.75)
    return os.path.join(folder, stems[close[0]]) if close else None


def file_hint(path: str) -> str:
    """``"; did you mean 'export.yaml'?"`` for a missing file with a close sibling, else ""."""
    close = closest_file(path)
    return "; did you mean %r?" % close if close else ""
