"""The app's state without Qt: what the reader has chosen (the conversation on show, the reply target,
drafts, filters), the joined groups' sessions with their unread counts and read marks, and the
notification levels.  Qt widgets and item models only mirror these, so they are tested without a
display (tests/ui/test_app_model.py); changes are told to listeners, as the reply tree tells its own."""
