"""Qt user interface of M2MC: models, views, dialogs and the middleware signal bridge."""
