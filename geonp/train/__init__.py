"""geonp.train."""
