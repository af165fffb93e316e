"""geonp.data."""
