# The driver of a Python code context (isolate/codecontext/codecontext.go), run as
# `python3 -c SOURCE`. It executes each request's code in one namespace that
# lives as long as the process.
#
# Requests arrive on stdin: a 4-byte big-endian length, then that many bytes
# of JSON {"code": str, "nonce": str}. Answers leave on a
# duplicate of the original fd 1, as frames: one type byte, a 4-byte
# big-endian length, the payload. Types: k ready; b a call begins, the
# request's nonce; i an interrupt taken; o, e output of the code (UTF-8
# text) on its fd 1, 2; r the repr of the last expression's value; R a rich
# result as JSON {"text", "html", "markdown", "svg", "png", "jpeg", "latex",
# "json", "is_main_result"} (what display() shows, the last expression's
# value when it offers more than its text, a matplotlib figure left open;
# images in base64; the value's R comes just before its r); x the error as
# JSON {name, value, traceback}; d done, JSON {"execution_count", "nonce"}. The service takes a call's frames from its b to the d that
# names its nonce: frames an earlier call left (or forged) are never the
# next call's.
#
# Fds 1 and 2 are pipes read by this process, so what child processes write
# there is the code's output too.

import ast
import base64
import codecs
import io
import json
import linecache
import os
import select
import signal
import struct
import sys
import threading
import traceback

MAX_TEXT = 1 << 20  # bytes of a result's repr or an error's text kept
MAX_RICH = 8 << 20  # bytes of a rich result's JSON (the service's bound)

# Figures are drawn off screen, whatever the image's matplotlib would pick.
os.environ.setdefault("MPLBACKEND", "Agg")

chan = os.fdopen(os.dup(1), "wb", buffering=0)
chan_lock = threading.Lock()
requests = os.fdopen(os.dup(0), "rb", buffering=0)
devnull = os.open(os.devnull, os.O_RDONLY)
os.dup2(devnull, 0)  # the code's stdin: the requests are not its to read
os.close(devnull)


def send(kind, payload):
    with chan_lock:
        send_locked(kind, payload)


def send_locked(kind, payload):
    chan.write(kind + struct.pack(">I", len(payload)) + payload)


def cut(text, limit=MAX_TEXT):
    data = text.encode("utf-8", "backslashreplace")
    if len(data) <= limit:
        return data
    return data[:limit].decode("utf-8", "ignore").encode() + b"..."


class Stream:
    """One of the code's output fds: a pipe whose reader forwards what
    arrives, all of it (the service keeps the head and the tail)."""

    def __init__(self, fd, kind):
        self.kind = kind
        self.lock = threading.Lock()
        r, w = os.pipe()
        os.dup2(w, fd)
        os.close(w)
        os.set_blocking(r, False)
        self.r = r
        self.reset()
        name = "stdout-pump" if fd == 1 else "stderr-pump"
        threading.Thread(target=self.pump, name=name, daemon=True).start()

    def reset(self):
        self.decoder = codecs.getincrementaldecoder("utf-8")("replace")

    def pump(self):
        # Until the end of the stream: the code closed the fd, and no child
        # holds it.
        while True:
            select.select([self.r], [], [])
            with self.lock:
                if not self.read_available():
                    return

    def read_available(self):
        # Holding self.lock: a drain after the code ends sees all it wrote.
        # False at the end of the stream.
        while True:
            try:
                data = os.read(self.r, 65536)
            except BlockingIOError:
                return True
            if not data:
                return False
            self.forward(data)

    def forward(self, data, final=False):
        text = self.decoder.decode(data, final)
        if text:
            send(self.kind, text.encode("utf-8", "surrogatepass"))

    def drain(self):
        with self.lock:
            self.read_available()
            text = self.decoder.decode(b"", True)
            if text:
                send(self.kind, text.encode("utf-8", "surrogatepass"))


sys.stdout.flush()
sys.stderr.flush()
streams = [Stream(1, b"o"), Stream(2, b"e")]
sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding="utf-8",
                              errors="backslashreplace", write_through=True)
sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), encoding="utf-8",
                              errors="backslashreplace", write_through=True)
sys.__stdout__, sys.__stderr__ = sys.stdout, sys.stderr

running = False


def on_sigint(signum, frame):
    # The service interrupts the code at a call's timeout, and sends the
    # signal again until told it was taken (i): one that comes while the
    # code is not running means nothing.
    if running:
        send(b"i", b"")
        raise KeyboardInterrupt


signal.signal(signal.SIGINT, on_sigint)

# IPython's display protocol: the formats an object offers, by method, and
# the result's field each fills (binary images in base64).
REPR_METHODS = (("_repr_html_", "html"), ("_repr_markdown_", "markdown"),
                ("_repr_svg_", "svg"), ("_repr_png_", "png"), ("_repr_jpeg_", "jpeg"),
                ("_repr_latex_", "latex"), ("_repr_json_", "json"))


format_types = {}  # type: whether its instances offer a format but text


def offers_formats(t):
    known = format_types.get(t)
    if known is None:
        known = not t.__module__.startswith("matplotlib.") and \
            any(hasattr(t, m) for m, _ in REPR_METHODS)
        if len(format_types) < 4096:
            format_types[t] = known
    return known


def rich(obj, main=False):
    """The formats obj offers, as a result's fields."""
    fields = {"text": cut(repr(obj)).decode()}
    for method, field in REPR_METHODS:
        fn = getattr(obj, method, None)
        if not callable(fn) or isinstance(obj, type):
            continue
        try:
            value = fn()
        except Exception:
            continue
        if isinstance(value, tuple):  # (data, metadata)
            value = value[0] if value else None
        if value is None:
            continue
        if field in ("png", "jpeg"):
            if isinstance(value, str):
                value = value.encode("latin-1", "replace")
            value = base64.b64encode(bytes(value)).decode()
        elif field == "json":
            try:
                json.dumps(value)
            except (TypeError, ValueError):
                continue
        elif isinstance(value, bytes):
            value = value.decode("utf-8", "replace")
        else:
            value = str(value)
        fields[field] = value
    if main:
        fields["is_main_result"] = True
    return fields


def send_rich(fields):
    data = json.dumps(fields).encode()
    # Over the bound: the largest formats are left out, the text kept.
    while len(data) > MAX_RICH and len(fields) > 1:
        big = max((k for k in fields if k not in ("text", "is_main_result")),
                  key=lambda k: len(json.dumps(fields[k])), default=None)
        if big is None:
            break
        del fields[big]
        data = json.dumps(fields).encode()
    send(b"R", data[:MAX_RICH])


def display(*objs, **_):
    """Shows each object in the call's results, in every format it offers."""
    for obj in objs:
        send_rich(rich(obj))


def figures():
    """The matplotlib figures left open, as PNG results, then closed: only
    when the code imported matplotlib's pyplot."""
    plt = sys.modules.get("matplotlib.pyplot")
    if plt is None:
        return
    try:
        for num in plt.get_fignums():
            fig = plt.figure(num)
            buf = io.BytesIO()
            fig.savefig(buf, format="png")
            send_rich({"text": repr(fig), "png": base64.b64encode(buf.getvalue()).decode()})
        plt.close("all")
    except Exception as e:
        send(b"e", ("the figures could not be drawn: %r\n" % (e,)).encode())


namespace = {"__name__": "__main__", "__builtins__": __builtins__, "display": display}
count = 0
driver_file = sys._getframe().f_code.co_filename


def without_driver(tb):
    while tb is not None and tb.tb_frame.f_code.co_filename == driver_file:
        tb = tb.tb_next
    return tb


def error_frame(e, tb):
    text = "".join(traceback.format_exception(type(e), e, without_driver(tb)))
    try:
        value = str(e)
    except BaseException:
        value = "<unprintable %s>" % type(e).__name__
    return json.dumps({"name": type(e).__name__, "value": cut(value, 65536).decode(),
                       "traceback": cut(text).decode()}).encode()


def compile_cell(code, name):
    linecache.cache[name] = (len(code), None, code.splitlines(True), name)
    tree = ast.parse(code, name, "exec")
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = ast.Expression(tree.body.pop().value)
    body = compile(tree, name, "exec")
    return body, (compile(last, name, "eval") if last is not None else None)


def run_cell(body, tail):
    global running
    running = True
    try:
        exec(body, namespace)
        value = eval(tail, namespace) if tail is not None else None
    finally:
        running = False
    if value is None:
        return None
    namespace["_"] = value
    text = cut(repr(value))
    # A value with no format but its text is the service's to make a
    # result of (from r: one frame less); a figure is drawn with the others
    # at the call's end.
    if not offers_formats(type(value)):
        return text, None
    return text, rich(value, main=True)


def run_with(request, cell):
    # The call's own options (isolate's CallOptions): "env" added to
    # os.environ and "cwd" entered for this call only; both are as they were
    # again once it ends, whatever the code changed of them.
    env = request.get("env") or {}
    cwd = request.get("cwd")
    saved = {k: os.environ.get(k) for k in env}
    before = None
    try:
        os.environ.update(env)
        if cwd:
            before = os.open(".", os.O_RDONLY | os.O_DIRECTORY)
            os.chdir(cwd)
        return run_cell(*cell)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        if before is not None:
            try:
                os.fchdir(before)
            finally:
                os.close(before)


def read_exact(n):
    data = bytearray()
    while len(data) < n:
        more = requests.read(n - len(data))
        if not more:
            return None
        data += more
    return bytes(data)


driver_pid = os.getpid()


send(b"k", b"")
while True:
    head = read_exact(4)
    if head is None:
        break
    request = json.loads(read_exact(struct.unpack(">I", head)[0]))
    nonce = str(request.pop("nonce", ""))
    send(b"b", nonce.encode())
    count += 1
    for s in streams:
        s.reset()
    result = error = main = None
    try:
        cell = compile_cell(request["code"], "<cell %d>" % count)
    except BaseException as e:
        # What compiling raises (SyntaxError) says where in the cell; the
        # driver's frames are not the code's.
        error = error_frame(e, None)
    else:
        try:
            result = run_with(request, cell)
            if result is not None:
                result, main = result
        except BaseException as e:
            error = error_frame(e, e.__traceback__)
        finally:
            running = False
    if os.getpid() != driver_pid:
        # A child the code forked came back here: the context is its
        # parent's, not its own.
        os._exit(0)
    for f in (sys.stdout, sys.stderr):
        try:
            f.flush()
        except BaseException:
            pass
    for s in streams:
        s.drain()
    if main is not None:
        send_rich(main)
    if result is not None:
        send(b"r", result)
    figures()
    if error is not None:
        send(b"x", error)
    send(b"d", json.dumps({"execution_count": count, "nonce": nonce}).encode())
