"""One training step's peaks of allocated bytes, phase by phase: the recording scripts' one way to measure them
(record_llama_step.py, record_memory.py; run from this folder, which is on their import path)."""
import torch


def phase_peaks(forward, optimizer) -> dict:
    """Bytes of one step on the GPU: allocated at its start; the peak of `forward()` (the forward with the loss,
    which it returns), of the loss's backward and of `optimizer`'s step with zero_grad(set_to_none=True), each
    after torch.cuda.reset_peak_memory_stats (so each is that phase's own peak, as max_memory_allocated gives it);
    the step's peak; and the reserved bytes' peak (the caching allocator releases nothing, so it is the run's)."""
    torch.cuda.reset_peak_memory_stats()
    start = torch.cuda.memory_allocated()
    loss = forward()
    torch.cuda.synchronize()
    fwd = torch.cuda.max_memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    loss.backward()
    torch.cuda.synchronize()
    bwd = torch.cuda.max_memory_allocated()
    del loss
    torch.cuda.reset_peak_memory_stats()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    optim = torch.cuda.max_memory_allocated()
    stats = torch.cuda.memory_stats()
    return {"at_step_start": start, "forward_peak": fwd, "backward_peak": bwd, "optimizer_peak": optim,
            "step_peak": max(fwd, bwd, optim), "reserved_peak": stats["reserved_bytes.all.peak"],
            "alloc_retries": stats.get("num_alloc_retries", 0)}
