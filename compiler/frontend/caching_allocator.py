"""PyTorch's CUDA caching allocator replayed on a step's allocations and frees: the bytes it reserves from the GPU.

`torch.cuda.max_memory_allocated` counts the tensors live at the peak (step_memory.py); the allocator reserves more
(`max_memory_reserved`, what torchtitan and nvidia-smi report): it never returns a segment it took from the GPU
during training, carves allocations out of the segments it holds, and cannot reuse a free gap smaller than the
next request. Its rules (c10/cuda/CUDACachingAllocator.cpp), replayed here in the step's order:
- sizes are rounded up to 512 B; requests of at most 1 MiB come from the small pool, in 2 MiB segments; larger
  ones from the large pool: under 10 MiB in 20 MiB segments, else a segment of their own rounded up to 2 MiB;
- a request takes the smallest free block of its pool that holds it (best fit); what is left over stays a free
  block of the segment when it is 512 B or more (small pool) or more than 1 MiB (large pool);
- a freed block merges with free neighbours of its segment; only a request that no free block holds takes a new
  segment, so the reserved bytes only grow;
- every segment belongs to the stream that allocated it, and a request is served only from free blocks of its own
  stream: FSDP2 allocates its all-gather buffers on its copy-in stream and the gradient shards the reduce-scatter
  writes on its reduce-scatter stream, so neither reuses the bytes the compute stream freed (nor the reverse).
With expandable segments (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, which torchtitan's launch script sets)
each stream's pool is one segment that grows at its end instead: a request no free block holds maps pages (2 MiB
in the small pool, 20 MiB in the large) after the segment's last block, taking that block too when it is free,
so the holes between live blocks are the only waste.
Not replayed: a block freed while another stream still uses it (record_stream) waits for that stream; the
garbage-collection option, and the release of cached blocks when the GPU runs out (reserved bytes are then
capped by the GPU's memory, which a layout close to the limit meets). docs/memory.md, "Memory per rank".
"""
from __future__ import annotations

import bisect

BLOCK = 512
SMALL = 2**20                # requests up to this size come from the small pool
SMALL_SEGMENT = 2 * 2**20
MIN_LARGE_SEGMENT = 10 * 2**20
LARGE_SEGMENT = 20 * 2**20
ROUND_LARGE = 2 * 2**20
# a free block's entry in its pool's sorted list: size * KEYS + its key (an int sorts as the pair (size, key) did,
# and compares in a fraction of its time: millions of requests replayed for a 175B GPT's pipeline stages)
KEYS = 2**40


class _Block:
    __slots__ = ("size", "free", "prev", "next", "key")

    def __init__(self, size: int, key: int):
        self.size, self.free, self.prev, self.next, self.key = size, False, None, None, key


class CachingAllocator:
    """The reserved bytes of a caching allocator fed `malloc(id, bytes, stream)` and `free(id)`; `expandable`:
    with expandable segments."""

    def __init__(self, expandable: bool = False):
        self.reserved = 0
        self.expandable = expandable
        self._last: dict[tuple, _Block] = {}  # expandable: a pool's segment -> its last block
        self._free: dict[tuple, list] = {}   # (stream, small pool?) -> sorted entries of its free blocks
        self._blocks: dict[int, _Block] = {}  # entry -> its free block
        self._held: dict[object, tuple] = {}  # allocation id -> (its block, its pool)
        self._keys = 0

    def malloc(self, ident, nbytes: int, stream: int = 0) -> None:
        # run millions of times for a 175B GPT's pipeline stages: the block lists and dicts are reached once each
        size = max(BLOCK, -(-nbytes // BLOCK) * BLOCK)
        small = size <= SMALL
        which = (stream, small)   # the pool: the stream's small or large blocks
        pool = self._free.get(which)
        if pool is None:
            pool = self._free[which] = []
        i = bisect.bisect_left(pool, size * KEYS)
        if i < len(pool):
            block = self._blocks.pop(pool.pop(i))
            block.free = False
        elif self.expandable:
            block = self._expand(which, size)
        else:
            segment = SMALL_SEGMENT if small else LARGE_SEGMENT if size < MIN_LARGE_SEGMENT else \
                -(-size // ROUND_LARGE) * ROUND_LARGE
            self.reserved += segment
            self._keys += 1
            block = _Block(segment, self._keys)
        rest = block.size - size
        if rest >= BLOCK if small else rest > SMALL:
            self._keys += 1
            tail = _Block(rest, self._keys)
            tail.prev, tail.next = block, block.next
            if block.next is not None:
                block.next.prev = tail
            block.next, block.size = tail, size
            if self._last and self._last.get(which) is block:
                self._last[which] = tail
            tail.free = True   # _release, inline
            entry = rest * KEYS + tail.key
            self._blocks[entry] = tail
            bisect.insort(pool, entry)
        self._held[ident] = (block, which)

    def free(self, ident) -> None:
        held = self._held.pop(ident, None)
        if held is None:
            return
        block, which = held
        prev, after = block.prev, block.next
        if prev is not None and prev.free:   # merge with free neighbours of the segment
            self._unlist(prev, which)
            block.size += prev.size
            block.prev = prev.prev
            if prev.prev is not None:
                prev.prev.next = block
        if after is not None and after.free:
            self._unlist(after, which)
            block.size += after.size
            block.next = after.next
            if after.next is not None:
                after.next.prev = block
            if self._last and self._last.get(which) is after:
                self._last[which] = block
        self._release(block, which)

    def _expand(self, which: tuple, size: int) -> _Block:
        """An expandable segment grown by whole pages to hold `size` after its last block (that block included
        when it is free): the block holding the request."""
        last = self._last.get(which)
        spare = last.size if last is not None and last.free else 0
        page = SMALL_SEGMENT if which[1] else LARGE_SEGMENT
        grown = -(-(size - spare) // page) * page
        self.reserved += grown
        if spare:
            self._unlist(last, which)
            last.size += grown
            last.free = False
            return last
        block = self._new(grown)
        block.prev = last
        if last is not None:
            last.next = block
        self._last[which] = block
        return block

    def _new(self, size: int) -> _Block:
        self._keys += 1
        return _Block(size, self._keys)

    def _release(self, block: _Block, which: tuple) -> None:
        block.free = True
        entry = block.size * KEYS + block.key
        self._blocks[entry] = block
        bisect.insort(self._free[which], entry)

    def _unlist(self, block: _Block, which: tuple) -> None:
        pool = self._free[which]
        entry = block.size * KEYS + block.key
        del pool[bisect.bisect_left(pool, entry)]
        del self._blocks[entry]


def reserved_bytes(before: list[int], events: list[tuple], steps: int = 2, expandable: bool = False) -> int:
    """The bytes the allocator reserves: `before` the sizes live when the step began (allocated in that order, on
    the compute stream 0), then `steps` runs of the step's `events`, each (id, bytes, stream) for an allocation
    or (id, None, None) for a free, in order; an id freed that was live before the step is one of `before` by its
    index ("b", i). `expandable`: with expandable segments."""
    alloc = CachingAllocator(expandable)
    for i, nbytes in enumerate(before):
        alloc.malloc(("b", i), nbytes)
    malloc, free = alloc.malloc, alloc.free
    for step in range(steps):
        for ident, nbytes, stream in events:
            if nbytes is None:
                free(ident if ident[0] == "b" else (step, ident))
            else:
                malloc((step, ident), nbytes, stream)
    return alloc.reserved
