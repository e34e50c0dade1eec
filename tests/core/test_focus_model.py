"""The main window's focus model without Qt (ui/focus.py): where the keys go after each navigation,
that background work never moves them unless it lost them, and when the topic field keeps them."""

import pytest

from m2mc.ui.focus import BACKGROUND, MOVES, Navigation, Place, after, field_takes_keys, topic_to_save


def test_every_navigation_is_either_a_move_of_the_users_or_background():
    assert MOVES | BACKGROUND == set(Navigation) and not MOVES & BACKGROUND


@pytest.mark.parametrize("navigation", sorted(MOVES, key=lambda n: n.name))
@pytest.mark.parametrize("keys_now", list(Place))
def test_after_a_move_the_keys_go_to_the_compose_box_on_show(navigation, keys_now):
    if navigation is Navigation.DIALOG_CLOSED and keys_now is Place.ELSEWHERE:
        assert after(navigation, "group", keys_now) is None  # a dialog that opened another window
        return
    assert after(navigation, "group", keys_now) is Place.COMPOSE
    assert after(navigation, "direct", keys_now) is Place.DIRECT_COMPOSE
    assert after(navigation, None, keys_now) is Place.FIRST_STEPS


def test_a_move_made_with_the_arrows_in_a_list_leaves_the_keys_in_it():
    assert after(Navigation.GROUP_SHOWN, "group", Place.SIDE_LIST, by_list_keys=True) is None
    assert after(Navigation.DIRECT_SHOWN, "direct", Place.SIDE_LIST, by_list_keys=True) is None
    assert after(Navigation.GROUP_SHOWN, "group", Place.SIDE_LIST) is Place.COMPOSE  # a click in it


@pytest.mark.parametrize("navigation", sorted(BACKGROUND, key=lambda n: n.name))
def test_background_work_moves_the_keys_only_when_it_lost_them(navigation):
    for keys_now in Place:
        expected = Place.COMPOSE if keys_now is Place.LOST else None
        assert after(navigation, "group", keys_now) is expected, keys_now
    assert after(navigation, "direct", Place.LOST) is Place.DIRECT_COMPOSE


def test_the_topic_takes_keys_only_by_the_users_choice():
    for reason in ("MouseFocusReason", "TabFocusReason", "BacktabFocusReason", "ShortcutFocusReason"):
        assert field_takes_keys(reason)
    for reason in ("OtherFocusReason", "ActiveWindowFocusReason", "PopupFocusReason", "NoFocusReason"):
        assert not field_takes_keys(reason)
    assert field_takes_keys("ActiveWindowFocusReason", chosen_before=True)  # back from another window


def test_enter_in_the_topic_saves_only_a_changed_text_in_a_chosen_field():
    assert topic_to_save(" Lunch ", "", chosen=True) == "Lunch"
    assert topic_to_save("Lunch", "Lunch", chosen=True) is None
    assert topic_to_save("hello", "", chosen=False) is None
