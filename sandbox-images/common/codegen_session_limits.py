"""Stateful sessions' limits and request checks (stdlib only, Python 3.11): the bounds of
protocol "session/3" (docs/sessions.md, "The protocol"), the worker's requests as the session
supervisor checks them, and the checks of what the kernel answers. The field and path checks
are the runner's own (codegen_protocol): one copy for both.
"""

import binascii
import json
import os

from codegen_protocol import (  # noqa: F401 (RequestError: S and the tests catch it here)
    MAX_OUTPUT_BYTES, MAX_TIMEOUT_MS, RequestError, integer_field, is_unicode, plain_parts,
)

PROTOCOL = "session/3"
# Where the worker mounts a session's installed packages (sandbox::PACKAGES_DIR).
PACKAGES_DIR = "/opt/packages"
# language.json name -> kernel kind.
SESSION_KINDS = {"python": "python", "python-sci": "python", "bash": "bash",
                 "javascript": "javascript"}
CODEGEN_DIR = os.path.dirname(os.path.abspath(__file__))
NODE_KERNEL = os.path.join(CODEGEN_DIR, "session_kernel.js")
BASH = "/bin/bash"
# Where the bash kernel writes each cell to source it (the program's own /tmp).
BASH_CELL_DIR = "/tmp/.codegen-session"

MAX_VALUE_BYTES = 64 << 10
MAX_MESSAGE_BYTES = 16 << 10
MAX_TRACEBACK_BYTES = 64 << 10
MAX_DISPLAY_BYTES = 32 << 20
MAX_FILES_CHANGED = 1000
MAX_LISTED = 10000
# Entries of /work a walk looks at (files_changed, list_files), at most.
MAX_WALK = 200_000
MAX_GET_BYTES = 64 << 20
MAX_PATH = 1024
# Bytes of one frame from K that S reads at most (a file of MAX_GET_BYTES in base64, and more).
MAX_REPLY = 96 << 20
# A checkpoint's limit at most: its answer, and the restore that brings it back, in base64
# stay well under codegen_protocol.MAX_FRAME.
MAX_CHECKPOINT_BYTES = 128 << 20
# Decoded bytes of one "chunk" frame of a checkpoint from K to S.
CHECKPOINT_CHUNK = 1 << 20
# "skipped" (checkpoint, restore): entries, and the UTF-8 bytes of a name and of a reason.
MAX_SKIPPED = 10000
MAX_SKIPPED_NAME = 1024
MAX_SKIPPED_REASON = 2048
MAX_CELLS = 1 << 40
# The first line of every state blob: its kernel kind and the kind's blob format's version.
STATE_MAGIC = b"codegen-session-state %s %d\n"
WORKING_DIRECTORY = "<working directory>"

START_TIMEOUT_S = 60.0
FILE_TIMEOUT_S = 30.0
# A restore may import heavy modules (numpy, pandas) and run the program's class bodies;
# under the worker's own 60 s for a request (sandbox/src/session.rs), so that the worker
# hears S's fatal answer rather than its own timeout.
RESTORE_TIMEOUT_S = 45.0
INTERRUPT_GRACE_S = 2.0
INTERRUPT_REPEAT_S = 0.5
MARKER_WAIT_S = 10.0
# Reads of one pipe per wake-up, at most (a writer that never stops must not starve the rest).
READS_PER_WAKE = 16


class SessionOver(Exception):
    """The session is over: a "fatal" answer, then S exits."""

    def __init__(self, message, oom_killed=False):
        super().__init__(message)
        self.message = message
        self.oom_killed = oom_killed


# ----------------------------------------------------------------------------- text


def clean_text(value, limit, tail=False):
    """A string for a frame: lone surrogates replaced, at most `limit` UTF-8 bytes (the head,
    or the tail), cut on a character boundary. Anything but a string gives ""."""
    if not isinstance(value, str):
        return ""
    data = value.encode("utf-8", "replace")
    if len(data) > limit:
        data = data[len(data) - limit:] if tail else data[:limit]
    return data.decode("utf-8", "ignore")


def cut_text(text, limit):
    """`text` cut to at most `limit` UTF-8 bytes (lone surrogates replaced)."""
    return clean_text(text, limit)


def is_utf8_name(name):
    return is_unicode(name)


# ----------------------------------------------------------------------------- requests


def check_path(path):
    """A path of put_file / get_file: relative, below /work. Returns its components."""
    if not isinstance(path, str) or not path or len(path) > MAX_PATH:
        raise RequestError("'path' must be a non-empty string of at most %d characters"
                           % MAX_PATH)
    if not is_utf8_name(path):
        raise RequestError("'path' must be valid Unicode (no lone surrogates)")
    parts = plain_parts(path)
    if parts is None:
        raise RequestError("'path' %r must be relative to the working directory, without "
                           "'..', '.', '//' or NUL" % path)
    return parts


def parse_request(raw):
    """The worker's request in the frame `raw`, checked; RequestError says what is wrong."""
    try:
        req = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise RequestError("request is not valid JSON: %s" % e)
    return check_request(req)


def check_request(req):
    """A decoded request, checked: the fields S uses, and nothing else."""
    if not isinstance(req, dict):
        raise RequestError("request must be a JSON object")
    kind = req.get("type")

    def integer(name, minimum, maximum):
        return integer_field(req, name, minimum, maximum)

    if kind == "cell":
        code = req.get("code")
        if not isinstance(code, str):
            raise RequestError("'code' must be a string")
        if not is_utf8_name(code):
            raise RequestError("'code' must be valid Unicode (no lone surrogates)")
        then = req.get("checkpoint")
        if then is not None:
            if not isinstance(then, dict):
                raise RequestError("'checkpoint' must be null or an object")
            then = check_request(dict(then, type="checkpoint"))
        return {"type": "cell", "code": code,
                "timeout_ms": integer("timeout_ms", 1, MAX_TIMEOUT_MS),
                "max_output_bytes": integer("max_output_bytes", 0, MAX_OUTPUT_BYTES),
                "checkpoint": then}
    if kind == "put_file":
        check_path(req.get("path"))
        data = req.get("base64")
        if not isinstance(data, str):
            raise RequestError("'base64' must be a string")
        try:
            binascii.a2b_base64(data, strict_mode=True)
        except (binascii.Error, ValueError) as e:
            raise RequestError("'base64' is not base64: %s" % e)
        return {"type": "put_file", "path": req["path"], "base64": data}
    if kind == "get_file":
        check_path(req.get("path"))
        return {"type": "get_file", "path": req["path"],
                "max_bytes": min(integer("max_bytes", 0, 1 << 62), MAX_GET_BYTES)}
    if kind == "list_files":
        return {"type": "list_files"}
    if kind == "checkpoint":
        if not isinstance(req.get("full"), bool):
            raise RequestError("'full' must be a boolean")
        return {"type": "checkpoint", "full": req["full"],
                "max_bytes": min(integer("max_bytes", 0, 1 << 62), MAX_CHECKPOINT_BYTES)}
    if kind == "restore":
        for name, nullable in (("state", False), ("files", True)):
            data = req.get(name)
            if data is None and nullable:
                continue
            if not isinstance(data, str):
                raise RequestError("'%s' must be a string%s" % (name, " or null" if nullable
                                                                 else ""))
            try:
                binascii.a2b_base64(data, strict_mode=True)
            except (binascii.Error, ValueError) as e:
                raise RequestError("'%s' is not base64: %s" % (name, e))
        return {"type": "restore", "state": req["state"], "files": req.get("files"),
                "cells": integer("cells", 0, MAX_CELLS)}
    if not isinstance(kind, str):
        raise RequestError("request must have a string 'type'")
    raise RequestError("unknown request type %r (cell, put_file, get_file, list_files, "
                       "checkpoint, restore)" % kind[:64])


def skipped_list(raw):
    """The "skipped" of a checkpoint or restore from K, checked and bounded: at most
    MAX_SKIPPED entries (then one that says how many more there were)."""
    out = []
    items = raw if isinstance(raw, list) else []
    for i, item in enumerate(items):
        if len(out) >= MAX_SKIPPED:
            out.append({"name": "...", "reason": "%d more names are not restored (the list "
                        "stops at %d)" % (len(items) - i, MAX_SKIPPED)})
            break
        if isinstance(item, dict) and isinstance(item.get("name"), str):
            out.append({"name": clean_text(item["name"], MAX_SKIPPED_NAME),
                        "reason": clean_text(item.get("reason"), MAX_SKIPPED_REASON)
                        or "it is not restored"})
    return out


def too_large(size, limit):
    return {"type": "error", "too_large": True,
            "message": "the checkpoint is %d bytes, over its limit of %d bytes "
                       "(worker.sessions.checkpoint_max_bytes)" % (size, limit)}
