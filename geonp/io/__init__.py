"""geonp.io."""
