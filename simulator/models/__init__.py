"""Model pairs and their set-up: the synthetic, table and random-rational pairs and :class:`ModelView`
(:mod:`.model_pairs`), one context's rows of several draft models (:mod:`.draft_rows`), and the counter-based normals
that seed the synthetic pair's logits (:mod:`.seeded_normals`)."""

from .draft_rows import DraftRows
from .model_pairs import (MODELS, Context, ContextTree, ModelPair, ModelView, RandomRationalModel, SyntheticModel,
                          TableModel, make_model, sequence_law, table_json)

__all__ = ["MODELS", "Context", "ContextTree", "DraftRows", "ModelPair", "ModelView", "RandomRationalModel",
           "SyntheticModel", "TableModel", "make_model", "sequence_law", "table_json"]
