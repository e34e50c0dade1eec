"""Where the keys go: the main window's one focus model, without Qt (issue 45).

A person types after every move about the window, and expects the letters in the compose box of the
conversation on show.  Before this model each route set the focus its own way, or not at all: a search
jump into a direct conversation left the keys on its reading view, where letters only searched the rows;
Back from a direct conversation let the focus fall down the Tab chain onto the paperclip, whose Space
opened a file dialog; a refresh or a page load could leave it on a hidden widget.

The model has three rules, each a function below, and the window applies them in one place
(``MainWindow.apply_focus``):

1. After a navigation the user asked for (:data:`MOVES`), the keys go to the compose box of the
   conversation now on show (:func:`after`); with nothing on show, to the first step ("Find groups…").
   A move made from a side list with its arrow keys leaves the keys in that list, so the arrows go on
   moving (its letters are passed on to the compose box on show, rule 3).
2. What happens around the user (:data:`BACKGROUND`: messages arriving, a page of history loading, a
   refresh, a model reset) never moves the keys, unless it left them nowhere: on a hidden or disabled
   widget, or on none.  Then they go back to the compose box on show.
3. A field that changes something for everyone (the topic) takes the keys only when the user clicked
   it, tabbed into it or chose it from a menu (:func:`field_takes_keys`); given the focus any other way
   it hands the keys on to the compose box.  Enter there saves only a changed text, and leaving it
   without Enter puts the topic back: a stray Enter or a stray letter changes nothing for anyone.
   Reading places (the conversation views, the side lists) pass typed letters on to the compose box.
"""

from __future__ import annotations

from enum import Enum


class Navigation(Enum):
    """What just happened in the window, for :func:`after`."""

    GROUP_SHOWN = "group shown"  # a click or arrow in the groups list, Ctrl+U, a dialog's new group
    DIRECT_SHOWN = "direct conversation shown"
    SEARCH_JUMP = "search result or link opened"
    BACK = "back (Alt+Left)"
    THREAD_OPENED = "thread opened"
    THREAD_CLOSED = "thread closed"
    ORDER_CHANGED = "tree or time order"
    DIALOG_CLOSED = "dialog closed"
    FIELD_LEFT = "a shared field left: Enter, or the keys given it by no choice of the user"
    PAGE_LOADED = "page of history loaded"
    MESSAGES_ARRIVED = "messages arrived"
    REFRESHED = "refreshed"
    MODEL_RESET = "model reset"


MOVES = frozenset({Navigation.GROUP_SHOWN, Navigation.DIRECT_SHOWN, Navigation.SEARCH_JUMP, Navigation.BACK,
                   Navigation.THREAD_OPENED, Navigation.THREAD_CLOSED, Navigation.ORDER_CHANGED,
                   Navigation.DIALOG_CLOSED, Navigation.FIELD_LEFT})
BACKGROUND = frozenset(Navigation) - MOVES


class Place(Enum):
    """Where the keys are (or go)."""

    COMPOSE = "the group's compose box"
    DIRECT_COMPOSE = "the direct conversation's compose box"
    FIRST_STEPS = "Find groups… on the empty page"
    SIDE_LIST = "a side list (groups, threads, direct messages, members)"
    READING = "a conversation view"
    FIELD = "a field the user chose (filter, topic)"
    OTHER = "another control of the window (a button)"
    ELSEWHERE = "another window of the app, or none active"
    LOST = "nowhere: no widget, or a hidden or disabled one"


def compose_for(on_show: str | None) -> Place:
    """The compose box of what is on show: "group", "direct", or None (the empty page)."""
    if on_show == "group":
        return Place.COMPOSE
    if on_show == "direct":
        return Place.DIRECT_COMPOSE
    return Place.FIRST_STEPS


def after(navigation: Navigation, on_show: str | None, keys_now: Place, by_list_keys: bool = False) -> Place | None:
    """Where the keys go after ``navigation``, with ``on_show`` ("group", "direct" or None) now shown
    and the keys at ``keys_now``; None leaves them where they are.  ``by_list_keys``: the move was made
    with the arrow keys in a side list (which keeps the keys, rules 1 and 3)."""
    if navigation in BACKGROUND:
        return compose_for(on_show) if keys_now is Place.LOST else None
    if by_list_keys and keys_now is Place.SIDE_LIST:
        return None
    if keys_now is Place.ELSEWHERE and navigation is Navigation.DIALOG_CLOSED:
        return None  # the dialog handed the keys to another window of the app: not ours to take
    return compose_for(on_show)


# Qt's focus reasons that are the user's own choice of a field, by name (Qt.FocusReason's names).
CHOSEN_REASONS = frozenset({"MouseFocusReason", "TabFocusReason", "BacktabFocusReason", "ShortcutFocusReason"})


def field_takes_keys(reason: str, chosen_before: bool = False) -> bool:
    """Whether a field that changes something for everyone keeps the focus given for ``reason`` (the name
    of a Qt.FocusReason); ``chosen_before``: the user chose it and the window was left and came back."""
    if reason in CHOSEN_REASONS:
        return True
    return chosen_before and reason == "ActiveWindowFocusReason"


def topic_to_save(typed: str, shown: str, chosen: bool) -> str | None:
    """What Enter in the topic field saves: the typed text, stripped, if the user chose the field and
    changed it; else None (nothing is sent to anyone)."""
    text = typed.strip()
    if not chosen or text == shown:
        return None
    return text
