"""Drafting: how a draft tree gets its tokens.

* :mod:`.shapes`: the drafter protocol, the drafting schemes and fixed shapes (re-exported here);
* :mod:`.lazy_draft`: drafting on demand, node by node, for the exact engine;
* :mod:`.dyspec` and :mod:`.aded`: DySpec's dynamic trees and ADED's adaptive tri-gram drafts;
* :mod:`.drafter_registry`: the drafters by name; :mod:`.arrays`: the schemes' array form for batched rounds.
"""

from .shapes import (DRAFTING, SCHEMES, Draft, Drafter, FixedShape, check_drafting, draft_models_for, draft_tree,
                     top_tokens)

__all__ = ["DRAFTING", "SCHEMES", "Draft", "Drafter", "FixedShape", "check_drafting", "draft_models_for", "draft_tree",
           "top_tokens"]
