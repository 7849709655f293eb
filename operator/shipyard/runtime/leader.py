"""Leader election glue (`reconcile.leader` decides, `kube.lease` calls): the operator waits for
the Lease before kopf starts, renews it from a thread of its own, exits non-zero the moment it
has lost it or could not renew it for the renew deadline, and releases it on a clean stop.

Threads rather than asyncio tasks: a renewal or the deadline check never waits behind a busy
event loop, and `os._exit` ends every driver at once, whatever it was doing.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

from shipyard.kube import lease as kube_lease
from shipyard.kube.client import own_namespace
from shipyard.kube.errors import ApiException, TransportError, describe
from shipyard.plan.settings import LEASE_NAMESPACE_ENV, LeaderSettings
from shipyard.reconcile.leader import LeaseState, Step, decide, must_stop, renew_timeout

EXIT_LOST = 3
"""The exit status of an operator that lost its lease (its pod restarts as a standby)."""
WATCHDOG_SEC = 0.2
log = logging.getLogger("shipyard.leader")


def _state(lease: kube_lease.Lease | None) -> LeaseState | None:
    if lease is None:
        return None
    return LeaseState(lease.holder, lease.renew_time, lease.duration_sec)


class Leadership:
    def __init__(self, settings: LeaderSettings, namespaces: list[str] | None = None) -> None:
        self.settings = settings
        self.namespace = settings.namespace or own_namespace()
        self.name = settings.lease_for(namespaces or [])
        self.identity = settings.identity or f"{socket.gethostname()}_{os.getpid()}"
        self.lease: kube_lease.Lease | None = None
        self.last_renewed: float | None = None
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None
        self._timeout = max(1.0, settings.retry_sec)

    @property
    def where(self) -> str:
        return f"lease {self.namespace}/{self.name}"

    def acquire(self, liveness: str | None = None) -> None:
        """Block until we hold the Lease. A standby answers `liveness` meanwhile (it is alive,
        only waiting), so that its pod is not restarted by its liveness probe."""
        standby = _StandbyHealth.start(liveness)
        try:
            self._acquire()
        finally:
            if standby is not None:
                standby.stop()

    def _acquire(self) -> None:
        s, seen, waiting_on = self.settings, None, None
        duration = round(s.lease_sec)
        while True:
            sent = time.monotonic()
            try:
                current = kube_lease.read(self.namespace, self.name, self._timeout)
                decision = decide(self.identity, _state(current), time.monotonic(), seen,
                                  s.lease_sec)
                seen = decision.seen
                if decision.step is Step.WAIT:
                    holder = current.holder if current else None
                    if holder != waiting_on:
                        log.info(f"standby: {self.where} is held by {holder}; taking over if it "
                                 f"is not renewed for {s.lease_sec:g}s")
                        waiting_on = holder
                    time.sleep(min(s.retry_sec, max(0.05, decision.wait_sec)))
                    continue
                if decision.step is Step.CREATE:
                    self.lease = kube_lease.create(self.namespace, self.name, self.identity,
                                                   duration, self._timeout)
                else:
                    assert current is not None
                    self.lease = kube_lease.write(self.namespace, self.name, current,
                                                  self.identity, duration, self._timeout)
                self.last_renewed = sent
                log.info(f"leading: {self.where} held by {self.identity} "
                         f"({decision.step.value}; transitions {self.lease.transitions})")
                return
            except kube_lease.LeaseConflict as e:  # another candidate was faster
                log.info(f"standby: {e}; looking again")
            except (ApiException, TransportError, OSError) as e:
                log.warning(f"standby: taking {self.where} failed: {self._why(e)}; again in "
                            f"{s.retry_sec:g}s")
                time.sleep(s.retry_sec)

    def _why(self, exc: BaseException) -> str:
        """One line (not the client's dump of headers and body), with what to change when the
        Lease's namespace does not exist (a kubeconfig whose namespace was deleted)."""
        why = describe(exc) or str(exc)
        if (isinstance(exc, ApiException) and exc.status == 404
                and f'namespaces "{self.namespace}" not found' in why):
            why += (f" (the Lease's namespace does not exist: create it, or set "
                    f"{LEASE_NAMESPACE_ENV} or the kubeconfig context's namespace to one "
                    "that does)")
        return why

    def keep(self) -> None:
        """Renew the Lease every retry period, and watch the renew deadline, in threads."""
        self._renewer = threading.Thread(target=self._renew, name="lease-renewer", daemon=True)
        self._renewer.start()
        threading.Thread(target=self._watchdog, name="lease-watchdog", daemon=True).start()

    def _renew(self) -> None:
        s, duration = self.settings, round(self.settings.lease_sec)
        while not self._stop.wait(s.retry_sec):
            sent = time.monotonic()
            assert self.lease is not None
            timeout = renew_timeout(self.last_renewed, sent, s.renew_deadline_sec, self._timeout)
            try:
                self.lease = kube_lease.write(self.namespace, self.name, self.lease,
                                              self.identity, duration, timeout)
                self.last_renewed = sent
            except kube_lease.LeaseConflict:
                try:
                    current = kube_lease.read(self.namespace, self.name, timeout)
                except (ApiException, TransportError, OSError) as e:
                    log.warning(f"renewing {self.where}: reading it failed: {self._why(e)}")
                    continue
                if current is not None and current.holder == self.identity:
                    self.lease = current  # our own write whose answer was lost: renew again
                    continue
                holder = current.holder if current else "nobody (deleted)"
                self._lost(f"{self.where} is now held by {holder}")
            except (ApiException, TransportError, OSError) as e:
                log.warning(f"renewing {self.where} failed: {self._why(e)}")

    def _watchdog(self) -> None:
        while not self._stop.wait(WATCHDOG_SEC):
            if must_stop(self.last_renewed, time.monotonic(), self.settings.renew_deadline_sec):
                self._lost(f"{self.where} not renewed for "
                           f"{self.settings.renew_deadline_sec:g}s")

    def _lost(self, why: str) -> None:
        """Stop driving at once: no second driver may ever run beside the next holder."""
        if self._stop.is_set():
            return
        log.critical(f"lost the leadership: {why}; exiting")
        for handler in logging.getLogger().handlers:
            handler.flush()
        os._exit(EXIT_LOST)

    def release(self) -> None:
        """After a clean stop (nothing drives any more): hand the Lease over at once."""
        self._stop.set()
        if self._renewer is not None:
            self._renewer.join(self._timeout + 1)
        if self.lease is None:
            return
        try:
            self.lease = kube_lease.write(self.namespace, self.name, self.lease, "", 1,
                                          self._timeout)
            log.info(f"released {self.where}")
        except (kube_lease.LeaseConflict, ApiException, TransportError, OSError) as e:
            log.warning(f"releasing {self.where} failed: {e}; it expires by itself")


class _StandbyHealth:
    """A bare `200 standby` on the liveness endpoint while kopf (which serves it later) waits."""

    def __init__(self, server: ThreadingHTTPServer) -> None:
        self.server = server

    @classmethod
    def start(cls, url: str | None) -> _StandbyHealth | None:
        if not url:
            return None
        parts = urlsplit(url)

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(200)
                self.end_headers()
                self.wfile.write(b"standby\n")

            def log_message(self, *_: object) -> None:
                pass

        try:
            server = ThreadingHTTPServer((parts.hostname or "0.0.0.0", parts.port or 80), Handler)
        except OSError as e:
            log.warning(f"standby: cannot serve {url}: {e}")
            return None
        threading.Thread(target=server.serve_forever, name="standby-health", daemon=True).start()
        return cls(server)

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
