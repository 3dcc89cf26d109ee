"""Topologies (builders, files), routes, ring embeddings and multicast/reduction trees.

See docs/topology.md. Everything public is importable from here.
"""

from .builders import build, default_for, fat_tree, full_mesh, mesh2d, ring, star, torus2d
from .graph import (
    LINK_ATTRS,
    LinkDefaults,
    LinkTable,
    boards,
    check,
    edge_index,
    link_table,
    n_boards,
    set_link,
    switches,
)
from .io import load, save, to_json
from .ring_embed import ring_hops, ring_order, ring_order_among
from .routing import WEIGHTS, NoRoute, Routes
from .trees import (
    Tree,
    bounded_tree,
    multicast_tree,
    reduction_parents,
    reduction_tree,
    tree_depth,
    tree_edges,
    tree_links,
    tree_root,
)

__all__ = [
    "LINK_ATTRS", "WEIGHTS", "LinkDefaults", "LinkTable", "NoRoute", "Routes", "Tree",
    "boards", "bounded_tree", "build", "check", "default_for", "edge_index", "fat_tree",
    "full_mesh", "link_table", "load", "mesh2d", "multicast_tree", "n_boards", "reduction_parents", "reduction_tree",
    "ring", "ring_hops", "ring_order", "ring_order_among", "save", "set_link", "star", "switches", "to_json",
    "torus2d", "tree_depth", "tree_edges", "tree_links", "tree_root",
]
