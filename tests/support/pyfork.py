"""The tests' Python: runs `PYTHON SCRIPT.py ARGS...` as a fork of a server that imported torch, transformers and
peft once, instead of a fresh interpreter that imports them again (6-9 s of CPU each, about a hundred times per
CTest run on a 2-core host).

Usage (the build's tests/python launcher does this): python -S pyfork.py REAL_PYTHON [ARGS...]
- `SCRIPT.py ARGS...` is sent to the server: the script runs in a fresh fork of it, in the caller's working
  directory and environment, with the caller's stdin, stdout and stderr (passed over the socket), as `__main__`.
  The exit status is the script's. A caller that dies takes the script's process group with it.
- Anything else (`-c`, `-m`, options), FT_PYFORK=0, or a server that cannot be reached runs REAL_PYTHON itself.
One server serves each interpreter and environment (the variables that imports read: see IMPORT_ENV); it starts on
the first request and exits after IDLE_S seconds without one. Its log: $TMPDIR/ft-pyfork-UID.log.
What differs from a fresh interpreter: a script's own changes to os.environ made before its imports do not reach
the preloaded packages (tqdm, transformers, peft, torch read some variables when imported), sys.argv[0] is the
absolute path, and tracebacks show runpy's frames.
"""
import array
import hashlib
import os
import socket
import struct
import sys
import time

IDLE_S = 300  # CTest can go minutes between two scripts; each restart imports again
START_WAIT_S = 90
PRELOAD = ("torch", "numpy", "safetensors.torch", "transformers", "peft", "jinja2")
# Variables read while the preloaded packages import (or the interpreter starts): a server serves only callers that
# agree on all of them. Others (TZ, TOKENIZERS_PARALLELISM, paths) are read later and follow each caller.
IMPORT_ENV = ("PYTHON", "OMP_", "GOMP_", "MKL_", "KMP_", "OPENBLAS", "TORCH", "PYTORCH", "CUDA", "NVIDIA", "HF_",
              "HUGGINGFACE", "TRANSFORMERS", "PEFT", "ACCELERATE", "TQDM", "USE_TORCH", "USE_TF", "LD_", "MALLOC_",
              "GLIBC_", "LANG", "LC_", "HOME", "XDG_")


def _socket_name(python):
    import shutil

    env = sorted((k, v) for k, v in os.environ.items() if k.startswith(IMPORT_ENV))
    try:
        mounts = os.readlink("/proc/self/ns/mnt")  # another container may share the network namespace, not the files
    except OSError:
        mounts = ""
    with open(__file__, "rb") as f:
        key = hashlib.sha256(repr((shutil.which(python) or python, f.read(), env, mounts)).encode()).hexdigest()[:20]
    return f"\0ft-pyfork-{os.getuid()}-{key}"  # abstract namespace: no file to leave behind


def _send_msg(sock, payload, fds=()):
    data = struct.pack("!I", len(payload)) + payload
    ancillary = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))] if fds else []
    sock.sendmsg([data[:1]], ancillary)  # the descriptors ride on the first byte; sendmsg may send less than asked
    sock.sendall(data[1:])


def _recv_exact(sock, n):
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("closed")
        buf += chunk
    return buf


# ---------------------------------------------------------------------------------------------------- client


def _run_here(python, args):
    os.execvp(python, [python] + args)


def _connect(name):
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(name)
        return sock
    except OSError:
        sock.close()
        return None


def _start_server(python, name):
    pid = os.fork()
    if pid == 0:
        try:
            os.setsid()
            if os.fork() != 0:
                os._exit(0)
            log = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"ft-pyfork-{os.getuid()}.log")
            fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0)
            os.dup2(fd, 1)
            os.dup2(fd, 2)
            os.closerange(3, 65536)
            os.execvp(python, [python, os.path.abspath(__file__), "--serve", name.lstrip("\0")])
        finally:
            os._exit(1)
    os.waitpid(pid, 0)


def _server_starting(name):
    """Whether some server holds the start lock (is importing); a server that gave up does not."""
    probe = _connect(name + "-starting")
    if probe is None:
        return False
    probe.close()
    return True


def client(python, args):
    script_call = args and args[0].endswith(".py") and not args[0].startswith("-") and os.path.isfile(args[0])
    if not script_call or os.environ.get("FT_PYFORK", "1") == "0":
        _run_here(python, args)
    name = _socket_name(python)
    sock = _connect(name)
    if sock is None:
        _start_server(python, name)
        started = time.monotonic()
        while sock is None and time.monotonic() < started + START_WAIT_S:
            time.sleep(0.05)
            sock = _connect(name)
            if sock is None and time.monotonic() > started + 2 and not _server_starting(name):
                sock = _connect(name)  # it may have come up between the two checks
                break
        if sock is None:
            _run_here(python, args)
    request = repr({"argv": args, "script": os.path.abspath(args[0]), "cwd": os.getcwd(), "env": dict(os.environ)})
    try:
        sock.settimeout(60)  # a worker answers at once; a server that cannot is no reason to wait for ever
        _send_msg(sock, request.encode(), fds=(0, 1, 2))
        _recv_exact(sock, 1)  # the script has started
        sock.settimeout(None)
    except OSError:  # a server that was leaving (idle) or failed: the script did not start, so it runs here
        _run_here(python, args)
    try:
        status = struct.unpack("!i", _recv_exact(sock, 4))[0]
    except OSError as e:
        sys.stderr.write(f"pyfork: lost the server while {args[0]} ran ({e!r})\n")
        sys.exit(1)
    # As a shell reports them: the exit code, or 128 + the signal that ended the script.
    sys.exit(status if status >= 0 else 128 - status)


# ---------------------------------------------------------------------------------------------------- server


def _preload():
    import importlib

    # A probe of the GPU during the imports must not initialise the CUDA driver: a fork cannot use a driver its parent
    # initialised. NVML answers the same question without it.
    nvml_check = "PYTORCH_NVML_BASED_CUDA_CHECK" not in os.environ
    if nvml_check:
        os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1"
    for module in PRELOAD:
        try:
            importlib.import_module(module)
        except Exception as e:  # a missing reference package: its scripts import (and fail) as they would alone
            print(f"pyfork: preloading {module}: {e!r}", flush=True)
    if nvml_check:
        del os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"]
    import gc

    gc.collect()
    gc.freeze()  # the forks share the preloaded objects' pages instead of copying them when the collector runs


def _receive_request(conn):
    header = conn.recvmsg(4, socket.CMSG_LEN(3 * array.array("i").itemsize))
    data, ancillary = header[0], header[1]
    fds = array.array("i")
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[: len(payload) - len(payload) % fds.itemsize])
    if len(data) < 4:
        data += _recv_exact(conn, 4 - len(data))
    (length,) = struct.unpack("!I", data)
    import ast

    return ast.literal_eval(_recv_exact(conn, length).decode()), list(fds)


def _watch(conn, pid):
    """The worker: waits for the script (pid, its own process group) and reports its status; kills the group if
    the caller goes away first."""
    import select
    import signal

    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            code = os.waitstatus_to_exitcode(status)
            try:
                conn.sendall(struct.pack("!i", code))
            except OSError:
                pass
            return
        readable, _, _ = select.select([conn], [], [], 0.1)
        if readable and not conn.recv(1):
            try:
                os.killpg(pid, signal.SIGKILL)
            except OSError:
                os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return


def _become_script(request, fds):
    """In the script's process: the caller's stdio, directory, environment and arguments."""
    import random
    import signal

    os.setpgid(0, 0)
    for target, fd in enumerate(fds[:3]):
        os.dup2(fd, target)
    for fd in fds:
        if fd > 2:
            os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    time.tzset()
    if "tempfile" in sys.modules:
        sys.modules["tempfile"].tempdir = None  # found again from this caller's TMPDIR
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    random.seed()  # a fresh interpreter seeds from the OS; every fork would otherwise draw the same numbers
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed()
    if "torch" in sys.modules:
        sys.modules["torch"].seed()
    sys.argv = list(request["argv"])
    if not getattr(sys.flags, "safe_path", False):
        sys.path[0] = os.path.dirname(request["script"])
    return request["script"]


def serve(name):
    """Returns the script to run as __main__ in a fork; never returns in the server itself."""
    import select
    import signal

    starting = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        starting.bind(name + "-starting")  # one server imports at a time; the others' callers wait for it
        starting.listen(1)  # _server_starting's probe connects
    except OSError:
        os._exit(0)
    os.chdir("/")
    _preload()
    if "torch" in sys.modules and sys.modules["torch"].cuda.is_initialized():
        print("pyfork: CUDA was initialised while preloading; its forks could not use it", flush=True)
        os._exit(0)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listener.bind(name)
    except OSError:
        os._exit(0)
    listener.listen(64)
    starting.close()
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # workers are reaped by the kernel
    print(f"pyfork: serving {name[1:]} (pid {os.getpid()})", flush=True)
    while True:
        readable, _, _ = select.select([listener], [], [], IDLE_S)
        if not readable:
            os._exit(0)
        try:
            conn, _ = listener.accept()
        except OSError as e:
            print(f"pyfork: {e!r}", flush=True)
            continue
        try:
            worker = os.fork()
        except OSError as e:  # the caller, refused, runs the script itself
            print(f"pyfork: {e!r}", flush=True)
            conn.close()
            continue
        if worker != 0:
            conn.close()
            continue
        listener.close()
        script = _work(conn)
        if script is not None:
            return script


def _work(conn):
    """The worker for one caller: returns the script's path in the script's process, exits in its own."""
    import signal

    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    pid = 0
    try:
        credentials = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        peer_uid = struct.unpack("3i", credentials)[1]  # pid, uid, gid
        if peer_uid != os.getuid():
            raise PermissionError(f"a caller of uid {peer_uid}")
        request, fds = _receive_request(conn)
        pid = os.fork()
        if pid == 0:
            conn.close()
            return _become_script(request, fds)
        try:
            os.setpgid(pid, pid)  # as the script does itself: whichever runs first, the group exists for _watch
        except OSError:
            pass
        for fd in fds:
            os.close(fd)
        conn.sendall(b"s")
        _watch(conn, pid)
    except BaseException as e:  # the caller then reports a lost server (or runs the script itself)
        print(f"pyfork: worker: {e!r}", flush=True)
        if pid > 0:
            try:
                os.killpg(pid, signal.SIGKILL)
            except OSError:
                pass
        os._exit(1)
    os._exit(0)


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--serve":
        script = serve("\0" + sys.argv[2])
        import runpy

        runpy.run_path(script, run_name="__main__")  # SystemExit and errors end the process as they would alone
        return
    client(sys.argv[1], sys.argv[2:])


if __name__ == "__main__":
    main()
