"""ASTRA-sim 2.x system configuration files (`--system sys.json`): the one reader, mapping each key to the option
of this compiler that means the same, and naming every key it cannot honour.

    scheduling-policy              FIFO: collectives of a stream start in issue order, as here; LIFO: warned
    intra-dimension-scheduling     FIFO | SCF                -> --intra fifo | scf
    inter-dimension-scheduling     baseline | themis         -> --scheduler; offlineGreedy(Flex) -> optimal, warned
    active-chunks-per-dimension    N                         -> --active-chunks N
    preferred-dataset-splits       N                         -> --chunks N
    <kind>-implementation          one name per dimension    -> --algorithm (the run's collective kind; a step
                                   (ring, direct, halvingDoubling, doubleBinaryTree ->
                                   astra_sim_double_binary_tree,
                                   oneRing, oneDirect, oneHalvingDoubling,       takes all-reduce's for every kind)
                                   oneDoubleBinaryTree)
    roofline-enabled, peak-perf    1, TFLOPS                 -> --peak-tflops (a training step's compute)
    local-mem-bw                   GB/s                      -> --local-mem-bw (reductions cost local memory time)
    endpoint-delay                 ns                        -> --endpoint-delay (once per message)
    (any file)                                               -> --step-semantics astra-sim (a training step),
                                                                --switching store-and-forward (congestion)
    collective-optimization        baseline (the default)    -> --all-reduce per-dimension (all-reduces only)
                                   localBWAware              -> --all-reduce hierarchical
    boost-mode (other than 0) and any other key: not modelled here, each named in a warning line (and
    doubleBinaryTree where ASTRA-sim runs a whole all-reduce in place of a reduce-scatter or all-gather)

An option given on the command line wins over the file; where the file is silent, ASTRA-sim's defaults apply
(baseline scheduler, FIFO within a dimension). A file that is not a JSON object, a value of the wrong
type and an unknown implementation name end the run in one line naming the file, the key and the value.
With a network file (.yml or .json) as --topology the run reads the network as ASTRA-sim does (per-link FC
bandwidth, full bandwidth per message on a Ring: _network_conventions); docs/astra-sim.md states every difference.
"""
from __future__ import annotations

import json
import re

from ...network.errors import UserError
from ...network.user_files import read_json
from ...network.memory import check_local_mem_gbps
from ...network.units import MAX_LATENCY_NS
from ...network.units import check_peak_tflops

IMPLEMENTATIONS = {"ring": "ring", "direct": "direct", "halvingDoubling": "halving_doubling",
                   "doubleBinaryTree": "astra_sim_double_binary_tree", "oneRing": "flat_ring",
                   "oneDirect": "flat_direct", "oneHalvingDoubling": "flat_halving_doubling",
                   "oneDoubleBinaryTree": "flat_double_binary_tree"}
KIND_KEYS = {"all_reduce": "all-reduce-implementation", "all_gather": "all-gather-implementation",
             "reduce_scatter": "reduce-scatter-implementation", "all_to_all": "all-to-all-implementation"}
SCHEDULERS = {"baseline": "baseline", "themis": "themis", "offlineGreedy": "optimal", "offlineGreedyFlex": "optimal"}
INTRA = {"FIFO": "fifo", "SCF": "scf"}
# collective-optimization -> --all-reduce. baseline: an all-reduce on every dimension in turn, each on the whole
# chunk; localBWAware: reduce-scatter up the dimensions, all-reduce on the last, all-gather back (this compiler's
# hierarchical decomposition)
OPTIMIZATIONS = {"baseline": "per-dimension", "localBWAware": "hierarchical"}
MAX_FILE_BYTES = 1 << 20
# what ASTRA-sim's implementations run as here: the warnings and notes below concern ASTRA-sim's own behaviour for
# them (named by the file's words, not by this compiler's algorithms)
DBT = IMPLEMENTATIONS["doubleBinaryTree"]   # its chunks as ASTRA-sim runs them (algorithms/astra_sim_*.py)
RING = IMPLEMENTATIONS["ring"]
HALVING_DOUBLING = (IMPLEMENTATIONS["halvingDoubling"], IMPLEMENTATIONS["oneHalvingDoubling"])


def read(job, given: set, step: bool) -> tuple[dict, dict, list[str]]:
    """What the file named by job.system (a Job, job.py) sets: the command-line options (dest -> value) the
    command line left at their defaults (`given`: those it names) take the file's values. Returns (those values,
    for Job.with_options; which key set each option, {dest: (key, value)}, for `blamed`; the warning and note
    lines, which the caller shows once the run has gone through: a refused run says its one line only)."""
    path = job.system
    config = _read(path)
    warnings: list[str] = []
    values: dict = {}
    origin: dict = {}

    def option(dest: str):   # the run's value of an option: the file's where it set one, else the job's
        return values[dest] if dest in values else job.option(dest)

    def warn(message: str) -> None:
        warnings.append(f"astra-compile: warning: {path}: {message}")

    def setting(dest: str, value, key: str | None = None) -> None:
        if dest not in given:
            values[dest] = value
            if key is not None:
                origin[dest] = (key, config[key])

    # ASTRA-sim's own defaults where the file says nothing: baseline dimension order, FIFO within a dimension
    setting("scheduler", "baseline")
    setting("intra", "fifo")
    # its congestion-aware backend moves a chunk whole from link to link (Link::schedule_chunk_transmission); the
    # analytical backend has no switching to set
    if option("backend") == "congestion":
        setting("switching", "store-and-forward")
    if step:   # a step runs as ASTRA-sim's workload layer runs one (runtime/workload_engine.py)
        setting("step_semantics", "astra-sim")
    for key, value in config.items():
        if key in KIND_KEYS.values():
            continue   # below, for the run's collective kind
        if key == "scheduling-policy":
            if _word(path, key, value, ("FIFO", "LIFO")) == "LIFO":
                warn("scheduling-policy LIFO is not modelled: collectives of a stream start in issue order (FIFO)")
        elif key == "intra-dimension-scheduling":
            setting("intra", INTRA[_word(path, key, value, tuple(INTRA))], key)
        elif key == "inter-dimension-scheduling":
            name = _word(path, key, value, tuple(SCHEDULERS))
            if name.startswith("offline"):
                warn(f"inter-dimension-scheduling {name} runs as --scheduler optimal (an offline balance of the "
                     "dimension orders by CP-SAT, not ASTRA-sim's greedy)")
            setting("scheduler", SCHEDULERS[name], key)
        elif key == "active-chunks-per-dimension":
            setting("active_chunks", str(_count(path, key, value)), key)
        elif key == "preferred-dataset-splits":
            setting("chunks", str(_count(path, key, value)), key)
        elif key == "peak-perf":
            perf = check_peak_tflops(value, f"{path}: {key}")
            if step and config.get("roofline-enabled", 0):
                setting("peak_tflops", perf, key)
        elif key == "roofline-enabled":
            if isinstance(value, bool) or value not in (0, 1):
                raise UserError(f"{path}: roofline-enabled must be 0 or 1, got {value!r}")
            if step and not value:
                warn("roofline-enabled 0 (compute from the trace's own durations) is not modelled: compute runs on "
                     "the roofline (--peak-tflops)")
        elif key == "collective-optimization":
            _word(path, key, value, tuple(OPTIMIZATIONS))   # ASTRA-sim stops on any other value
        elif key == "boost-mode" and value == 0:
            continue
        elif key == "local-mem-bw":   # GB/s; ASTRA-sim's own files give 1e9 for "no local-memory term"
            setting("local_mem_bw", check_local_mem_gbps(value, f"{path}: {key}"), key)
        elif key == "endpoint-delay":   # ns each message step spends at its endpoints (ASTRA-sim's MemBus delay);
            # 0 is ASTRA-sim's own default, as it is --endpoint-delay's
            setting("endpoint_delay", str(_number(path, key, value, 0.0, MAX_LATENCY_NS, "ns")), key)
        else:
            warn(f"{key} {json.dumps(value)[:60]} is not modelled by astra-compile")
    kind = "all_reduce" if step or not option("collective") else option("collective")
    names = _implementation(path, config, KIND_KEYS.get(kind, KIND_KEYS["all_reduce"]))
    if names is not None:   # one name for every dimension stays one (a flat algorithm takes one name)
        setting("algorithm", names[0] if len(set(names)) == 1 else ",".join(names), KIND_KEYS[kind])
        if kind == "all_to_all" and any(n in HALVING_DOUBLING for n in names):
            warn("halvingDoubling all-to-all runs here; ASTRA-sim refuses it (its all-to-all implementations are "
                 "direct and ring), so the run has no ASTRA-sim figure to compare with")
        if DBT in names and kind != "all_reduce":
            warn(f"doubleBinaryTree for {kind}: ASTRA-sim runs a whole all-reduce there; here it runs as NCCL's "
                 "double binary tree (two trees, each carrying half of every chunk)")
    # the run's algorithm (the command line's, else the file's) may run one phase over all NPUs (ASTRA-sim's One*
    # implementations, --algorithm multitree): nothing to split then
    if kind == "all_reduce" and not _flat(str(option("algorithm") or "").split(",")):
        setting("all_reduce", OPTIMIZATIONS[config.get("collective-optimization", "baseline")],
                "collective-optimization" if "collective-optimization" in config else None)
        topology = _topology(option)
        several = topology is None or topology.ndims > 1
        if DBT in (names or ()) and option("all_reduce") == "hierarchical" \
                and several:
            warn("doubleBinaryTree under localBWAware: ASTRA-sim runs a whole all-reduce on a doubleBinaryTree "
                 "dimension even where it reduce-scatters or all-gathers; here those phases of an all-reduce over "
                 "several dimensions run as NCCL's double binary tree (two trees, each carrying half)")
    if kind == "all_to_all" and RING in (names or ()):
        # Ring.cc, All_to_All: (k-1)k/2 messages of 1/k of the data, each to the next member, one after another
        warn("ring all-to-all: ASTRA-sim's is another algorithm (k(k-1)/2 messages of 1/k of the chunk, each to the "
             "next member of one direction's ring, one after another: about (k-1)/2 x the chunk / bandwidth); here "
             "the pairwise exchange with the members at each distance, about 3.5x faster on Ring(8)")
    if option("scheduler") == "themis" and "scheduler" in origin:
        topology = _topology(option)
        fc = [d for d, dim in enumerate(topology.dims) if dim.block == "FullyConnected"] \
            if topology is not None and topology.ndims > 1 else []
        if fc:
            # its Themis weighs a dimension by get_BW_at_dimension: the network file's bandwidth of one link
            warn(f"themis with FullyConnected dimension(s) {', '.join(map(str, fc))}: ASTRA-sim's Themis weighs an "
                 "FC dimension by one link's bandwidth, not the k-1 links its direct algorithm uses at once, and "
                 "orders the chunks by that; here by the NPU's whole bandwidth in it, so this run can be well "
                 "below ASTRA-sim's time")
    notes = _network_conventions(option, setting, given, names, kind)
    if step:
        others = {k: _implementation(path, config, key) for k, key in KIND_KEYS.items() if key in config}
        if any(v != names for v in others.values()):
            warn("a training step runs every collective with all-reduce-implementation's algorithms; the other "
                 "kinds' implementations differ and are not honoured")
    return values, origin, warnings + [f"astra-compile: note: {path}: {n}" for n in notes]


def blamed(error: Exception, job, origin: dict) -> Exception:
    """`error` (a refusal of the run) with the system file's key in front where an option the file set (`origin`,
    from `read`) is what the message names (its flag, or for --algorithm an algorithm it chose; `job`: the run's,
    the file's values in it): the user never typed that option."""
    text = str(error)
    for dest, (key, value) in origin.items():
        named = [f"--{dest.replace('_', '-')}"]
        if dest == "algorithm":
            named += str(job.option(dest)).split(",")
        if any(re.search(rf"(?<![\w-]){re.escape(n)}(?![\w-])", text) for n in named):
            return type(error)(f"{job.system}: {key} {json.dumps(value)}: {text}")
    return error


def _topology(option):
    """The run's topology as given (--topology: notation or network file; `option`: the run's option values by
    dest), None without one."""
    if not option("topology"):
        return None
    from ...network.parse import parse_topology
    return parse_topology(option("topology"), option("bandwidth"), option("latency"), option("links"))


def _flat(names: list) -> bool:
    """Does the run use a whole-network algorithm (one phase over every NPU, no dimensions to split over)?"""
    from ...algorithms import whole_network
    return any(whole_network(n) is not None for n in names or ())


def _network_conventions(option, setting, given: set, names: list | None, kind: str) -> list[str]:
    """A run from ASTRA-sim files (a network .yml or .json with --system) reads the network as ASTRA-sim does:
    a FullyConnected(k) dimension's bandwidth is per link, k-1 links per NPU all in use at once; a Ring gives every
    message the full bandwidth, which this compiler's two-way ring gives only to the ring algorithm. Both become
    --bandwidth per NPU per dimension here (unless --bandwidth is given): set with `setting`, as every value the
    file gives (`option`: the run's option values by dest). Returns what was converted."""
    spec = option("topology") or ""
    if "bandwidth" in given or not spec.lower().endswith((".yml", ".yaml", ".json")):
        return []
    from ...network.parse import parse_topology
    topology = parse_topology(spec, None, option("latency"), option("links"))
    if topology.graph is not None:
        return []
    algorithms = names if names is None or len(names) == len(topology.dims) else [names[0]] * len(topology.dims)
    # what a message gets there (no option: the step semantics take it)
    setting("astra_link_gbps", tuple(float(dim.bandwidth_gbps) for dim in topology.dims))
    out, notes = [], []
    for d, dim in enumerate(topology.dims):
        bw = float(dim.bandwidth_gbps)
        algorithm = algorithms[d] if algorithms else dim.kind.default_for(dim.size, kind)
        if dim.kind.name == "FullyConnected":
            notes.append(f"dimension {d} FullyConnected({dim.size}): {bw:g} GB/s per link x {dim.size - 1} links = "
                         f"{bw * (dim.size - 1):g} GB/s per NPU")
            bw *= dim.size - 1
        elif dim.kind.name == "Ring" and algorithm != RING:
            notes.append(f"dimension {d} Ring({dim.size}) with {algorithm}: every message at the full {bw:g} GB/s "
                         f"(as ASTRA-sim): {2 * bw:g} GB/s per NPU over the two directions")
            bw *= 2
        out.append(bw)
    if notes:
        setting("bandwidth", ",".join(repr(b) for b in out))
    return notes


def _read(path: str) -> dict:
    data = read_json(path, "an ASTRA-sim system JSON object", "system file ", MAX_FILE_BYTES)
    if not isinstance(data, dict):
        raise UserError(f"{path}: an ASTRA-sim system file is a JSON object of keys, got {type(data).__name__}")
    return data


def _word(path, key, value, allowed: tuple) -> str:
    if value not in allowed:
        raise UserError(f"{path}: {key} must be one of {', '.join(allowed)}, got {value!r}")
    return value


def _count(path, key, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 1 << 20:
        raise UserError(f"{path}: {key} must be a whole number from 1 to {1 << 20}, got {value!r}")
    return value


def _number(path, key, value, low: float, high: float, unit: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
        raise UserError(f"{path}: {key} must be a number of {unit} from {low:g} to {high:g}, got {value!r}")
    return float(value)


def _implementation(path, config: dict, key: str) -> list[str] | None:
    """The per-dimension algorithm names of an implementation key (a list, or one name for every dimension)."""
    if key not in config:
        return None
    value = config[key]
    items = value if isinstance(value, list) else [value]
    if not items or not all(isinstance(v, str) for v in items):
        raise UserError(f"{path}: {key} must be a list of implementation names, got {value!r}")
    out = []
    for v in items:
        if v not in IMPLEMENTATIONS:
            raise UserError(f"{path}: {key}: unknown implementation '{v}' (one of {', '.join(IMPLEMENTATIONS)})")
        out.append(IMPLEMENTATIONS[v])
    return out
