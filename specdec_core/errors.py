"""One typed error for everything a user can get wrong.

The CLI turns it into a one-line message and exit code 2; the app into `st.error`.
"""


class SpecDecError(ValueError):
    """Bad input or a missing resource, with a message meant for the user."""
