"""Private Redis and PostgreSQL servers for fault tests: started by the test, restarted by the test,
stopped afterwards. The machine's own servers are never touched."""

import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import psycopg
import redis

PG_BIN = next(iter(sorted(Path("/usr/lib/postgresql").glob("*/bin"))), None)
# runuser is in /usr/sbin, which a clean PATH (env -i PATH=/usr/local/bin:/usr/bin:/bin, as CI runs) leaves out.
RUNUSER = shutil.which("runuser") or shutil.which("runuser", path="/usr/sbin:/sbin") or "runuser"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class SilentServer:
    """A TCP server on loopback that accepts every connection and never answers (a hung Redis: the
    process alive, its event loop stuck). Closed with `close()`."""

    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.1)
        self.port = self._listener.getsockname()[1]
        self._held: list[socket.socket] = []
        self._closing = threading.Event()
        self._thread = threading.Thread(target=self._accept, name="silent-server", daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self._closing.is_set():
            try:
                conn, _addr = self._listener.accept()
            except TimeoutError:
                continue
            self._held.append(conn)  # kept open, never read, never written

    def close(self) -> None:
        # The thread ends before the descriptor is freed: a thread still in accept() on a closed
        # listener reads whichever socket is given that number next.
        self._closing.set()
        self._thread.join()
        self._listener.close()
        for conn in self._held:
            conn.close()


def _wait(check, *, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if check():
                return
        except Exception:  # not up yet
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.1)


class PrivateRedis:
    def __init__(self, folder: Path):
        self.port = free_port()
        self.folder = folder
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self._log = (self.folder / "redis.log").open("ab")
        log = self._log
        args = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        self.proc = subprocess.Popen([*args, "--dir", str(self.folder)], stdout=log, stderr=subprocess.STDOUT)
        _wait(lambda: redis.Redis(port=self.port, socket_connect_timeout=0.5).ping(), timeout=20, what="redis up")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=10)
        if self.proc is not None:
            self._log.close()

    def restart(self, *, down: float = 2.0) -> None:
        self.stop()
        time.sleep(down)
        self.start()


class PrivatePostgres:
    """A throwaway cluster owned by the `postgres` OS user (initdb refuses to run as root)."""

    def __init__(self, settings: dict[str, object] | None = None):
        # Not under pytest's tmp_path: its parents are private to root, and the server runs as postgres.
        folder = Path(tempfile.mkdtemp(prefix="harness-pg-"))
        folder.chmod(0o755)
        self.port = free_port()
        self.data = folder / "pgdata"
        self.socket_dir = folder / "pgsock"
        self.log = folder / "postgres.log"
        self.folder = folder
        # Server settings (max_connections=100, ...) given on every start, as -c name=value.
        self.settings = "".join(f" -c {name}={value}" for name, value in (settings or {}).items())

    @property
    def url(self) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/harness"

    def _as_postgres(self, *args: str) -> None:
        prefix = [RUNUSER, "-u", "postgres", "--"] if os.geteuid() == 0 else []
        subprocess.run([*prefix, *args], check=True, capture_output=True, timeout=120)

    def start(self) -> None:
        if not self.data.exists():
            for path in (self.data, self.socket_dir):
                path.mkdir(parents=True)
            if os.geteuid() == 0:
                shutil.chown(self.folder, "postgres")
                for path in (self.data, self.socket_dir):
                    shutil.chown(path, "postgres")
            self._as_postgres(str(PG_BIN / "initdb"), "-D", str(self.data), "-A", "trust", "-U", "postgres")
            first = True
        else:
            first = False
        self._ctl("start", "-w", "-o", self._options())
        _wait(self._up, timeout=30, what="postgres up")
        if first:
            with psycopg.connect(self._dsn("postgres"), autocommit=True) as conn:
                conn.execute("CREATE DATABASE harness")

    def _options(self) -> str:
        return f"-p {self.port} -k {self.socket_dir} -c listen_addresses=127.0.0.1{self.settings}"

    def _ctl(self, *args: str) -> None:
        if os.geteuid() == 0:
            shutil.chown(self.folder, "postgres")
        self._as_postgres(str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-l", str(self.log), *args)

    def _dsn(self, db: str = "harness") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{db}"

    def _up(self) -> bool:
        with psycopg.connect(self._dsn("postgres"), connect_timeout=1):
            return True

    def connect(self) -> psycopg.Connection:
        return psycopg.connect(self._dsn(), autocommit=True)

    def rows(self, sql: str, *args) -> list[tuple]:
        """One query on a fresh connection: the test's view of the database, beside the processes'."""
        with self.connect() as conn:
            return conn.execute(sql, args).fetchall()

    def restart(self, *, down: float = 2.0) -> None:
        self._ctl("stop", "-m", "fast", "-w")
        time.sleep(down)
        self._ctl("start", "-w", "-o", self._options())
        _wait(self._up, timeout=30, what="postgres up again")

    def stop(self) -> None:
        if self.data.exists():
            try:
                self._ctl("stop", "-m", "immediate", "-w")
            except subprocess.CalledProcessError:
                pass  # not running
        shutil.rmtree(self.folder, ignore_errors=True)
