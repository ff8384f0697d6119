"""In-container entry point of a stateful session (stdlib only, Python 3.11), run as
`python3 -I /opt/codegen/session.py` in a container of the session's own, hardened as the
pool's are (uid 0 with only CAP_SETUID, CAP_SETGID and CAP_KILL, no-new-privileges; it refuses
to start otherwise). It speaks protocol "session/3" on its stdin/stdout (docs/sessions.md, "The
protocol"): codegen_session.py holds the session supervisor (S), codegen_session_kernel.py and
the modules beside it the kernel (K); the security core it shares with the runner is
codegen_guard.py, the image's language codegen_languages.py.

The modules are imported from this file's folder (-I keeps it off sys.path); the Python
kernel takes the folder off sys.path before any cell runs, and a module already imported
cannot be shadowed by a file a cell writes.

`--selftest` checks the privileges, the language configuration and what the image's kernel
needs, and exits.
"""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import codegen_guard  # noqa: E402
import codegen_languages  # noqa: E402
import codegen_session  # noqa: E402
from codegen_protocol import write_frame  # noqa: E402


def main(argv):
    language, problems = codegen_languages.configure()
    problems = codegen_guard.check_privileges() + problems
    if argv == ["--selftest"]:
        problems += codegen_session.selftest_problems(language)
        print("ok" if not problems else "; ".join(problems))
        return 0 if not problems else 1
    if argv:
        sys.stderr.write("usage: session.py [--selftest]\n")
        return 2
    try:
        if problems:
            write_frame(1, {"type": "fatal", "message": "; ".join(problems), "oom_killed": False})
            return 2
        return codegen_session.serve(language)
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
