"""geonp.models."""
