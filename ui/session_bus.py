"""The app's one connection to the desktop's session bus (D-Bus), for desktop notifications and the
desktop's light/dark setting.

The connection is jeepney's (pure Python): QtDBus, as PySide6 binds it, cannot send the unsigned
integers that ``org.freedesktop.Notifications.Notify`` takes, nor hand its signals to a Python slot.
Every window and service of the app shares the one connection (:meth:`SessionBus.shared`, one per
bus address), read from Qt's event loop through a socket notifier: a signal (a notification clicked,
the desktop turned dark) reaches its handler in the GUI thread.  Calls wait for their reply (a
local service answers in a millisecond or two; at most ``CALL_TIMEOUT``); signals that come meanwhile
are handed out after the call returns.  Without a session bus (no ``DBUS_SESSION_BUS_ADDRESS``, or it
refuses us) :meth:`shared` is None and the app does without.
"""

from __future__ import annotations

import logging
import os
from typing import Callable, ClassVar

from jeepney import DBusAddress, MatchRule, Message, MessageType, new_method_call
from jeepney.bus_messages import message_bus
from jeepney.io.blocking import DBusConnection, open_dbus_connection
from jeepney.low_level import HeaderFields
from PySide6.QtCore import QObject, QSocketNotifier, QTimer

log = logging.getLogger(__name__)

CALL_TIMEOUT = 2.0  # seconds a call may wait for its reply


class SessionBusError(Exception):
    """A call failed: an error reply, no reply in time, or the bus went away."""


class SessionBus(QObject):
    _opened: ClassVar[dict[str, SessionBus | None]] = {}

    def __init__(self, connection: DBusConnection) -> None:
        super().__init__()
        self.connection = connection
        self._listeners: list[tuple[MatchRule, Callable[[Message], None]]] = []
        self._held: list[Message] = []  # signals read while a call waited for its reply
        self._reader = QSocketNotifier(connection.sock.fileno(), QSocketNotifier.Type.Read, self)
        self._reader.activated.connect(self._read)

    @classmethod
    def shared(cls) -> SessionBus | None:
        """The app's connection to the session bus named by DBUS_SESSION_BUS_ADDRESS, opened on first
        use; None without one."""
        address = os.environ.get("DBUS_SESSION_BUS_ADDRESS", "")
        if not address:
            return None
        if address not in cls._opened:
            try:
                cls._opened[address] = cls(open_dbus_connection(address))
            except Exception as exc:  # noqa: BLE001 - any failure means: no session bus for the app
                log.info("no session bus at %s: %s", address, exc)
                cls._opened[address] = None
        return cls._opened[address]

    def call(self, message: Message, timeout: float = CALL_TIMEOUT) -> tuple:
        """Send a method call and return its reply's body; SessionBusError if it failed."""
        if self.connection is None:
            raise SessionBusError("the session bus connection is closed")
        serial = next(self.connection.outgoing_serial)
        try:
            self.connection.send(message, serial=serial)
            while True:
                reply = self.connection.receive(timeout=timeout)
                if reply.header.fields.get(HeaderFields.reply_serial) == serial:
                    break
                self._held.append(reply)
        except (OSError, TimeoutError, ValueError) as exc:
            raise SessionBusError(f"{message.header.fields.get(HeaderFields.member)}: {exc or 'no reply'}") from exc
        finally:
            if self._held:
                QTimer.singleShot(0, self._hand_out_held)
        if reply.header.message_type is MessageType.error:
            raise SessionBusError(f"{reply.header.fields.get(HeaderFields.error_name)}: {reply.body}")
        return reply.body

    def call_method(self, service: str, path: str, interface: str, method: str, signature: str | None = None,
                    body: tuple = ()) -> tuple:
        return self.call(new_method_call(DBusAddress(path, bus_name=service, interface=interface), method,
                                         signature, body))

    def has_name(self, name: str) -> bool:
        """Whether a service of that name is on the bus now."""
        try:
            return bool(self.call(message_bus.NameHasOwner(name))[0])
        except SessionBusError:
            return False

    def listen(self, rule: MatchRule, handler: Callable[[Message], None]) -> None:
        """Call ``handler`` with each message that ``rule`` matches (the bus is asked to send them)."""
        self._listeners.append((rule, handler))
        try:
            self.call(message_bus.AddMatch(rule))
        except SessionBusError as exc:
            log.info("the session bus refused a match rule: %s", exc)

    def _read(self, *_args) -> None:
        if self.connection is None:
            return
        while True:  # everything the socket has: one read may hold several messages
            try:
                message = self.connection.receive(timeout=0)
            except TimeoutError:
                break
            except (OSError, ValueError) as exc:  # the bus went away (a logout, a test's daemon stopped)
                log.info("the session bus connection ended: %s", exc)
                self._reader.setEnabled(False)
                self.connection = None
                return
            self._hand_out(message)

    def _hand_out_held(self) -> None:
        held, self._held = self._held, []
        for message in held:
            self._hand_out(message)

    def _hand_out(self, message: Message) -> None:
        for rule, handler in list(self._listeners):
            if rule.matches(message):
                try:
                    handler(message)
                except Exception:  # noqa: BLE001 - one bad handler must not stop the others or the bus
                    log.exception("a session bus handler failed")
