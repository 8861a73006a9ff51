import json
from collections import Counter

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from astra_compile.network.errors import UserError
from astra_compile.network.blocks import BLOCKS
from astra_compile.network.links import Link
from astra_compile.network.parse import parse_topology
from astra_compile.network.topology import Dimension, Topology

SEED_JSON = {
    "dimensions-count": 3,
    "topologies-per-dim": ["Switch", "Switch", "Switch"],
    "units-count": [8, 8, 8],
    "links-count": [1, 1, 1],
    "link-latency": [1, 1, 1],
    "link-bandwidth": [50, 50, 50],
}


def blocks_and_shape(topo):
    return [d.block for d in topo.dims], topo.shape


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def error_of(*args, **kwargs):
    with pytest.raises(UserError) as info:
        parse_topology(*args, **kwargs)
    message = str(info.value)
    assert "\n" not in message
    return message


# ----------------------------------------------------------------- notation


def test_block_notation_and_canonical_name():
    topo = parse_topology("Ring(4)_FC(2)_Switch(8)")
    assert blocks_and_shape(topo) == (["Ring", "FullyConnected", "Switch"], (4, 2, 8))
    assert topo.name == "Ring(4)_FullyConnected(2)_Switch(8)"
    assert topo.npus == 64


def test_block_names_are_case_insensitive_with_aliases():
    topo = parse_topology("ring(2)_fullyconnected(3)_sw(4)_SWITCH(2)_fc(2)")
    assert topo.name == "Ring(2)_FullyConnected(3)_Switch(4)_Switch(2)_FullyConnected(2)"


def test_defaults():
    topo = parse_topology("Ring(8)_Switch(4)")
    for d in topo.dims:
        assert (d.bandwidth_gbps, d.latency_ns, d.links) == (50.0, 500.0, 1)


@pytest.mark.parametrize(
    "spec, name",
    [
        ("8x8_torus", "Ring(8)_Ring(8)"),
        ("4x4x4_torus", "Ring(4)_Ring(4)_Ring(4)"),
        ("16x16x16_torus", "Ring(16)_Ring(16)_Ring(16)"),
        ("64_switch", "Switch(64)"),
        ("8x8_switch", "Switch(8)_Switch(8)"),
        ("8_ring", "Ring(8)"),
        ("8x4_fc", "FullyConnected(8)_FullyConnected(4)"),
        ("2X4_Torus", "Ring(2)_Ring(4)"),
    ],
)
def test_shorthands(spec, name):
    assert parse_topology(spec).name == name


def test_shorthand_npus():
    assert parse_topology("16x16x16_torus").npus == 4096


def test_shape_notation():
    topo = parse_topology("Ring_FC_Ring_Switch:2x8x8x4")
    assert blocks_and_shape(topo) == (["Ring", "FullyConnected", "Ring", "Switch"], (2, 8, 8, 4))
    assert topo.name == "Ring(2)_FullyConnected(8)_Ring(8)_Switch(4)"
    assert topo.npus == 512


def test_overrides_strings_lists_and_broadcast():
    topo = parse_topology("Ring(4)_FC(2)_Switch(8)", bandwidth="100,50,25", latency=[1, 2, 3], links="2")
    assert [d.bandwidth_gbps for d in topo.dims] == [100.0, 50.0, 25.0]
    assert [d.latency_ns for d in topo.dims] == [1.0, 2.0, 3.0]
    assert [d.links for d in topo.dims] == [2, 2, 2]
    assert [d.effective_gbps for d in topo.dims] == [200.0, 100.0, 50.0]
    assert parse_topology("8x8_torus", latency="0").dims[1].latency_ns == 0.0


# ----------------------------------------------------------------- files


def test_seed_json(tmp_path):
    path = write(tmp_path, "net.json", json.dumps(SEED_JSON))
    topo = parse_topology(path)
    assert topo.name == "Switch(8)_Switch(8)_Switch(8)"
    assert topo.npus == 512
    for d in topo.dims:
        assert (d.bandwidth_gbps, d.latency_ns, d.links) == (50.0, 1.0, 1)
    assert topo.describe().splitlines()[0] == "dim 0: Switch(8)  50 GB/s  1 ns  links 1"


def test_json_ignores_fields_it_does_not_model(tmp_path):
    data = dict(SEED_JSON, **{"topology-name": "Hierarchical", "hbm-bandwidth": [370, 370, 370]})
    assert parse_topology(write(tmp_path, "net.json", json.dumps(data))).npus == 512


def test_seed_yml(tmp_path):
    path = write(tmp_path, "net.yml", "topology: Switch\nnpus_count: 64\nbandwidth: [50]\nlatency: [500]\n")
    topo = parse_topology(path)
    assert topo.name == "Switch(64)"
    assert (topo.dims[0].bandwidth_gbps, topo.dims[0].latency_ns, topo.dims[0].links) == (50.0, 500.0, 1)


def test_yml_lists(tmp_path):
    text = (
        "topology: [ Ring, FullyConnected, Switch ]\n"
        "npus_count: [ 4, 2, 8 ]\n"
        "bandwidth: [ 200.0, 100.0, 50.0 ]\n"
        "latency: [ 700.0, 600.0, 500.0 ]\n"
        "links_count: [ 2, 1, 1 ]\n"
    )
    topo = parse_topology(write(tmp_path, "net.yaml", text))
    assert topo.name == "Ring(4)_FullyConnected(2)_Switch(8)"
    assert [d.bandwidth_gbps for d in topo.dims] == [200.0, 100.0, 50.0]
    assert [d.latency_ns for d in topo.dims] == [700.0, 600.0, 500.0]
    assert [d.links for d in topo.dims] == [2, 1, 1]


def test_yml_missing_optional_values_use_defaults(tmp_path):
    topo = parse_topology(write(tmp_path, "net.yml", "topology: [Ring, Ring]\nnpus_count: [4, 4]\n"))
    assert [(d.bandwidth_gbps, d.latency_ns, d.links) for d in topo.dims] == [(50.0, 500.0, 1)] * 2


def test_arguments_override_file_values(tmp_path):
    path = write(tmp_path, "net.json", json.dumps(SEED_JSON))
    topo = parse_topology(path, bandwidth="25", latency="10,20,30")
    assert [d.bandwidth_gbps for d in topo.dims] == [25.0] * 3
    assert [d.latency_ns for d in topo.dims] == [10.0, 20.0, 30.0]
    assert [d.links for d in topo.dims] == [1, 1, 1]


# ----------------------------------------------------------------- errors


@pytest.mark.parametrize(
    "spec, fragments",
    [
        ("Rign(8)", ["unknown topology block 'Rign(8)'", "Ring(k)", "FC(k)", "SW(k)"]),
        ("Ring(4)_Tree(2)", ["unknown topology block 'Tree(2)'"]),
        ("Ring(8", ["malformed topology block 'Ring(8'"]),
        ("Ring()", ["malformed topology block 'Ring()'", "integer"]),
        ("Ring(x)", ["malformed topology block 'Ring(x)'"]),
        ("Ring(-2)", ["malformed topology block 'Ring(-2)'"]),
        ("Ring(0)", ["Ring(0)", "at least 2", "got 0"]),
        ("Ring(1)", ["Ring(1)", "at least 2", "got 1"]),
        ("Ring(4)_Ring(1)", ["dimension 1", "Ring(1)"]),
        ("Ring(4)__FC(2)", ["empty block"]),
        ("Ring_FC", ["'Ring'", "no size", "Ring_FC:4x2"]),
        ("", ["empty topology"]),
        ("   ", ["empty topology"]),
        ("8x8_dragonfly", ["unknown topology shorthand '8x8_dragonfly'"]),
        ("8x1_torus", ["size must be at least 2", "got 1"]),
        ("Ring_FC:4", ["2 blocks", "1 dimension"]),
        ("Ring_Tree:4x4", ["unknown topology block 'Tree'"]),
        ("Ring_FC:4xx4", ["malformed shape '4xx4'"]),
    ],
)
def test_notation_errors(spec, fragments):
    message = error_of(spec)
    for fragment in fragments:
        assert fragment in message


@pytest.mark.parametrize(
    "kwargs, fragments",
    [
        ({"bandwidth": "50,50"}, ["bandwidth", "got 2 values", "expected 3"]),
        ({"latency": [1, 2, 3, 4]}, ["latency", "got 4 values", "expected 3"]),
        ({"links": "1,1"}, ["links", "got 2 values", "expected 3"]),
        ({"bandwidth": "0"}, ["bandwidth must be positive", "0"]),
        ({"bandwidth": "50,-1,50"}, ["bandwidth must be positive", "-1"]),
        ({"latency": "-1"}, ["latency must be >= 0", "-1"]),
        ({"links": "0"}, ["links must be positive", "0"]),
        ({"links": "1.5"}, ["links must be a whole number", "1.5"]),
        ({"bandwidth": "fast"}, ["bandwidth", "'fast' is not a number"]),
    ],
)
def test_override_errors(kwargs, fragments):
    message = error_of("Ring(4)_FC(2)_Switch(8)", **kwargs)
    for fragment in fragments:
        assert fragment in message


def test_missing_file(tmp_path):
    path = str(tmp_path / "nope.yml")
    assert error_of(path) == f"topology file '{path}' not found"
    assert "not found" in error_of(str(tmp_path / "nope.json"))


def test_existing_file_with_other_extension(tmp_path):
    path = write(tmp_path, "net.txt", "topology: Switch\n")
    assert "must end in .yml, .yaml or .json" in error_of(path)


@pytest.mark.parametrize(
    "text, fragments",
    [
        ("topology: [Ring, Ring\nnpus_count: [4, 4]\n", ["malformed YAML"]),
        ("- Ring\n- Switch\n", ["must be a YAML mapping"]),
        ("npus_count: [4, 4]\n", ["missing 'topology'"]),
        ("topology: [Ring, Ring]\n", ["missing 'npus_count'"]),
        ("topology: [Ring, Ring]\nnpus_count: [4, 4, 4]\n", ["'npus_count' has 3 entries", "2 dimensions"]),
        ("topology: [Ring, Ring]\nnpus_count: [4, 4]\nbandwidth: [50, 50, 50]\n", ["'bandwidth' has 3 entries"]),
        ("topology: [Ring, Rign]\nnpus_count: [4, 4]\n", ["unknown topology block 'Rign'"]),
        ("topology: [Ring, Ring]\nnpus_count: [4, 1]\n", ["dimension 1", "at least 2"]),
        ("topology: [Ring, Ring]\nnpus_count: [4, four]\n", ["dimension 1", "whole number", "four"]),
        ("topology: Switch\nnpus_count: 64\nbandwidth: [0]\n", ["bandwidth must be positive"]),
        ("topology: Switch\nnpus_count: 64\nlatency: [-5]\n", ["latency must be >= 0"]),
        ("topology: Switch\nnpus_count: 64\nlinks_count: [0]\n", ["links must be between 1 and 1024"]),
        ("topology: Switch\nnpus_count: 64\nbandwith: [50]\n", ["unknown key 'bandwith'"]),
        ("topology: []\nnpus_count: []\n", ["must not be empty"]),
    ],
)
def test_bad_yml(tmp_path, text, fragments):
    path = write(tmp_path, "bad.yml", text)
    message = error_of(path)
    assert path in message
    for fragment in fragments:
        assert fragment in message


@pytest.mark.parametrize(
    "data, fragments",
    [
        ("{not json", ["is not JSON"]),
        ([1, 2], ["must be a JSON object"]),
        (dict(SEED_JSON, **{"dimensions-count": 2}), ["dimensions-count is 2", "3 dimensions"]),
        (dict(SEED_JSON, **{"units-count": [8, 8]}), ["'units-count' has 2 entries"]),
        (dict(SEED_JSON, **{"link-bandwidth": [50, 50, 50, 50]}), ["'link-bandwidth' has 4 entries"]),
        (dict(SEED_JSON, **{"links-count": [1, 0, 1]}), ["dimension 1", "links must be between 1 and 1024"]),
        (dict(SEED_JSON, **{"topologies-per-dim": ["Switch", "Torus", "Switch"]}), ["unknown topology block 'Torus'"]),
        ({"units-count": [8]}, ["'topologies-per-dim' must be a non-empty list"]),
    ],
)
def test_bad_json(tmp_path, data, fragments):
    path = write(tmp_path, "bad.json", data if isinstance(data, str) else json.dumps(data))
    message = error_of(path)
    assert path in message
    for fragment in fragments:
        assert fragment in message


def test_dimension_validates_direct_construction():
    with pytest.raises(UserError, match="unknown topology block 'Torus'"):
        Dimension("Torus", 4, 50, 1)
    with pytest.raises(UserError, match="at least 2"):
        Dimension("Ring", 1, 50, 1)
    with pytest.raises(UserError, match="bandwidth must be positive"):
        Dimension("Ring", 4, 0, 1)
    with pytest.raises(UserError, match="latency must be >= 0"):
        Dimension("Ring", 4, 50, -1)
    with pytest.raises(UserError, match="links must be between 1 and 1024"):
        Dimension("Ring", 4, 50, 1, links=0)
    with pytest.raises(UserError, match="at least one dimension"):
        Topology(())


# ----------------------------------------------------------------- coordinates


@given(
    shape=st.lists(st.integers(min_value=2, max_value=6), min_size=1, max_size=4),
    data=st.data(),
)
def test_rank_coords_round_trip(shape, data):
    topo = Topology(tuple(Dimension("Ring", k, 50, 1) for k in shape))
    rank = data.draw(st.integers(min_value=0, max_value=topo.npus - 1))
    coords = topo.coords(rank)
    assert all(0 <= c < k for c, k in zip(coords, shape))
    assert topo.rank(coords) == rank
    # rank = c0 + s0*(c1 + s1*(c2 + ...)): dimension 0 varies fastest.
    expected = 0
    for c, k in reversed(list(zip(coords, shape))):
        expected = expected * k + c
    assert expected == rank
    assert tuple(topo.coords_array()[rank]) == coords


def test_coords_dimension_zero_fastest():
    topo = parse_topology("Ring(4)_FC(2)_Switch(8)")
    assert topo.shape == (4, 2, 8)
    assert topo.strides() == (1, 4, 8)
    assert topo.coords(0) == (0, 0, 0)
    assert topo.coords(1) == (1, 0, 0)
    assert topo.coords(4) == (0, 1, 0)
    assert topo.coords(8) == (0, 0, 1)
    assert topo.coords(63) == (3, 1, 7)
    assert topo.rank((3, 1, 7)) == 63


def test_coords_array():
    topo = parse_topology("Ring(3)_Switch(2)")
    arr = topo.coords_array()
    assert arr.dtype == np.int64
    assert arr.tolist() == [[0, 0], [1, 0], [2, 0], [0, 1], [1, 1], [2, 1]]


def test_coords_and_peer_errors():
    topo = parse_topology("Ring(4)_Ring(2)")
    with pytest.raises(UserError, match="rank 8 out of range"):
        topo.coords(8)
    with pytest.raises(UserError, match="out of range"):
        topo.rank((4, 0))
    with pytest.raises(UserError, match="expected 2 coordinates"):
        topo.rank((1,))
    with pytest.raises(UserError, match="dimension 2 out of range"):
        topo.peer(0, 2, 0)
    with pytest.raises(UserError, match="coordinate 2 out of range"):
        topo.peer(0, 1, 2)


def test_peer():
    topo = parse_topology("Ring(4)_FC(2)_Switch(8)")
    rank = topo.rank((1, 1, 5))
    assert topo.peer(rank, 0, 3) == topo.rank((3, 1, 5))
    assert topo.peer(rank, 1, 0) == topo.rank((1, 0, 5))
    assert topo.peer(rank, 2, 0) == topo.rank((1, 1, 0))
    assert topo.peer(rank, 2, 5) == rank


# ----------------------------------------------------------------- per-dimension model


def test_hops():
    ring = Dimension("Ring", 8, 50, 1)
    assert [ring.hops(0, b) for b in range(1, 8)] == [1, 2, 3, 4, 3, 2, 1]
    assert ring.hops(6, 1) == 3
    assert ring.hops(3, 3) == 0
    assert Dimension("FullyConnected", 8, 50, 1).hops(0, 7) == 1
    assert Dimension("Switch", 8, 50, 1).hops(2, 5) == 2
    with pytest.raises(UserError, match="coordinate 8 out of range"):
        ring.hops(0, 8)


def test_link_gbps():
    assert Dimension("Ring", 8, 100, 1).link_gbps() == 50.0
    assert Dimension("Ring", 2, 100, 1).link_gbps() == 50.0
    assert Dimension("Ring", 8, 100, 1, links=2).link_gbps() == 100.0
    assert Dimension("FullyConnected", 5, 100, 1).link_gbps() == 25.0
    assert Dimension("Switch", 8, 100, 1).link_gbps() == 100.0
    assert Dimension("Switch", 8, 100, 1, links=4).effective_gbps == 400.0


def test_every_block_has_a_default_algorithm():
    assert {"Ring", "FullyConnected", "Switch", "Mesh", "Graph"} <= set(BLOCKS)
    for block in BLOCKS.values():
        assert block.default_algorithm(8)


# ----------------------------------------------------------------- link graph


def test_ring_links():
    graph = parse_topology("Ring(4)", bandwidth="100", latency="7").links()
    assert len(graph) == 8
    assert graph.num_nodes == 4 and graph.num_switches == 0
    pairs = sorted(zip(graph.src.tolist(), graph.dst.tolist()))
    assert pairs == sorted([(i, (i + 1) % 4) for i in range(4)] + [(i, (i - 1) % 4) for i in range(4)])
    assert set(graph.gbps.tolist()) == {50.0}
    assert set(graph.latency_ns.tolist()) == {7.0}


def test_ring2_has_two_parallel_lanes():
    graph = parse_topology("Ring(2)").links()
    links = graph.as_links()
    assert len(links) == 4
    assert all(isinstance(link, Link) for link in links)
    assert sorted((l.src, l.dst, l.lane) for l in links) == [(0, 1, 0), (0, 1, 1), (1, 0, 0), (1, 0, 1)]


def test_fully_connected_links():
    graph = parse_topology("FC(4)", bandwidth="30").links()
    assert len(graph) == 12
    pairs = set(zip(graph.src.tolist(), graph.dst.tolist()))
    assert pairs == {(a, b) for a in range(4) for b in range(4) if a != b}
    assert set(graph.gbps.tolist()) == {10.0}


def test_switch_links():
    graph = parse_topology("Switch(4)").links()
    assert len(graph) == 8
    assert graph.num_switches == 1 and graph.num_nodes == 5
    pairs = set(zip(graph.src.tolist(), graph.dst.tolist()))
    assert pairs == {(i, 4) for i in range(4)} | {(4, i) for i in range(4)}


@pytest.mark.parametrize(
    "spec, per_group, groups",
    [
        ("Ring(4)_FC(3)", [8, 6], [3, 4]),
        ("FC(4)_Switch(2)", [12, 4], [2, 4]),
        ("Switch(4)_Switch(3)", [8, 6], [3, 4]),
        ("Ring(2)_FC(2)_Switch(2)", [4, 2, 4], [4, 4, 4]),
    ],
)
def test_multi_dim_link_counts(spec, per_group, groups):
    topo = parse_topology(spec)
    graph = topo.links()
    assert len(graph) == sum(p * g for p, g in zip(per_group, groups))
    per_dim = Counter(graph.dim.tolist())
    assert [per_dim[k] for k in range(topo.ndims)] == [p * g for p, g in zip(per_group, groups)]
    switch_groups = sum(g for d, g in zip(topo.dims, groups) if d.block == "Switch")
    assert graph.num_switches == switch_groups
    assert graph.num_nodes == topo.npus + switch_groups


def test_multi_dim_links_stay_within_their_dimension():
    topo = parse_topology("Ring(3)_FC(4)_Switch(2)", bandwidth="60,30,10", latency="1,2,3")
    graph = topo.links()
    coords = topo.coords_array()
    npu_to_npu = (graph.src < topo.npus) & (graph.dst < topo.npus)
    src_c, dst_c, dims = coords[graph.src[npu_to_npu]], coords[graph.dst[npu_to_npu]], graph.dim[npu_to_npu]
    for k in range(2):
        sel = dims == k
        diff = src_c[sel] != dst_c[sel]
        # Exactly the link's own coordinate differs.
        assert diff[:, k].all() and diff.sum(axis=1).tolist() == [1] * int(sel.sum())
    # Switch dimension: each group of 2 NPUs (same coords except dim 2) shares one switch.
    up = (graph.dim == 2) & (graph.src < topo.npus)
    switch_of = dict(zip(graph.src[up].tolist(), graph.dst[up].tolist()))
    assert len(set(switch_of.values())) == 12
    for rank in range(topo.npus):
        assert switch_of[rank] == switch_of[topo.peer(rank, 2, 0)]
        assert switch_of[rank] >= topo.npus
    assert Counter(graph.gbps[graph.dim == 0].tolist()) == {30.0: 48}
    assert Counter(graph.gbps[graph.dim == 1].tolist()) == {10.0: 72}
    assert Counter(graph.gbps[graph.dim == 2].tolist()) == {10.0: 48}
    assert set(graph.latency_ns[graph.dim == 2].tolist()) == {3.0}


# ----------------------------------------------------------------- describe / dict


def test_describe():
    topo = parse_topology("Ring(4)_Switch(8)", bandwidth="100,12.5", latency="500,1", links="2,1")
    assert topo.describe() == (
        "dim 0: Ring(4)  100 GB/s  500 ns  links 2\n"
        "dim 1: Switch(8)  12.5 GB/s  1 ns  links 1"
    )


def test_dict_round_trip_through_json():
    topo = parse_topology("Ring(4)_FC(2)_Switch(8)", bandwidth="100,50,25", latency="1,2,3", links="2,1,1")
    d = topo.to_dict()
    assert d["name"] == "Ring(4)_FullyConnected(2)_Switch(8)"
    assert d["dims"][0] == {"block": "Ring", "size": 4, "bandwidth_gbps": 100.0, "latency_ns": 1.0, "links": 2}
    again = Topology.from_dict(json.loads(json.dumps(d)))
    assert again == topo


def test_from_dict_errors():
    with pytest.raises(UserError, match="'dims' list"):
        Topology.from_dict({"name": "x"})
    with pytest.raises(UserError, match="dimension 0 must have keys"):
        Topology.from_dict({"dims": [{"block": "Ring"}]})
    with pytest.raises(UserError, match="dimension 0: size must be at least 2"):
        Topology.from_dict({"dims": [{"block": "Ring", "size": 1, "bandwidth_gbps": 1, "latency_ns": 1}]})
