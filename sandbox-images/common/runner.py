"""In-container fork-server runner of the codegen sandbox images (stdlib only, Python 3.11).

The same files serve every language image, run as `python3 -I /opt/codegen/runner.py`. One
long-lived runner per warm container: it reads requests on its stdin and answers on its stdout
(the protocol), runs each in a fresh program process that cannot reach what ran before it (the
security core) and runs programs the way the image's language.json says (the languages):

  codegen_protocol.py    frames, the request and what it may name; the contract with the
                         worker (sandbox/src/protocol.rs)
  codegen_guard.py       the security core, one reviewed unit: privileges, the zygote (Z),
                         the supervisor (C), the program process (P) up to the request, the
                         scrub, the kill, reading back files
  codegen_languages.py   language.json, validated, and what a language does in Z, P and C
  codegen_in_process.py  Python programs in P's own warm interpreter (and harness.py)
  codegen_exec.py        programs that are other executables: compile, exec, fd-3 report

The modules are imported from this file's folder (-I keeps it off sys.path), by the zygote,
before anything is forked; the folder leaves sys.path before any program runs, and a module
already imported cannot be shadowed by a file a program writes.

`--selftest` checks the privileges and the language configuration and exits.
"""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import codegen_guard  # noqa: E402
import codegen_languages  # noqa: E402
from codegen_protocol import write_frame  # noqa: E402


def main(argv):
    language, problems = codegen_languages.configure()
    problems = codegen_guard.check_privileges() + problems
    if argv == ["--selftest"]:
        print("ok" if not problems else "; ".join(problems))
        return 0 if not problems else 1
    if argv:
        sys.stderr.write("usage: runner.py [--selftest]\n")
        return 2
    try:
        if problems:
            write_frame(1, {"type": "fatal", "message": "; ".join(problems), "oom_killed": False})
            return 2
        return codegen_guard.serve(language)
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
