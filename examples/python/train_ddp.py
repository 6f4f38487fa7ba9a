#!/usr/bin/env python3
"""Fashion-MNIST in PyTorch: DistributedDataParallel over gloo, or one process.

The reference runs for the libdsm programs: the same MLP, data split, batch
per worker, initialisation and learning-rate schedule (fmnist.py), trained by
synchronous SGD. With --workers W > 1, W processes (one per host) form a gloo
process group over TCP and DDP all-reduces the gradient each step; with
--workers 1 it is plain PyTorch in one process, the no-network reference.

DDP averages the gradients; a libdsm worker adds its own -lr * gradient to a
model that is the sum of all workers' updates. So DDP runs at W times the
per-worker learning rate: both then move the model by -lr * (sum of the W
workers' gradients) per step, DDP with staleness 0.

  python3 train_ddp.py --workers 3 --rank K --master-addr 198.18.0.1 --iface dsm0
  python3 train_ddp.py --workers 1          # one process

Bytes on the wire: DDP all-reduces the whole gradient, 4 bytes per parameter,
per step (in two buckets); gloo's ring all-reduce sends 2 (W-1)/W of it per
worker. With --iface the worker also reads its interface's tx_bytes
counter before and after training (what really went out, TCP/IP included).
"""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fmnist  # noqa: E402


def parse():
    p = fmnist.common_args(__doc__.splitlines()[0])
    p.add_argument("--master-addr", default="127.0.0.1", help="rank 0's address")
    p.add_argument("--master-port", type=int, default=29500)
    p.add_argument("--iface", default="",
                   help="network interface gloo uses (GLOO_SOCKET_IFNAME) and whose "
                        "tx_bytes are reported")
    p.add_argument("--init-timeout", type=float, default=60,
                   help="seconds to wait for the other workers to join")
    a = p.parse_args()
    fmnist.check_args(a)
    return a


def tx_bytes(iface):
    try:
        with open(f"/sys/class/net/{iface}/statistics/tx_bytes") as f:
            return int(f.read())
    except (OSError, ValueError):
        return None


def main():
    a = parse()
    fmnist.limit_threads(a.threads)
    if a.iface:
        os.environ["GLOO_SOCKET_IFNAME"] = a.iface
    import datetime

    import numpy as np
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    torch.set_num_threads(a.threads)
    ddp = a.workers > 1
    program = "ddp-gloo" if ddp else "torch-1proc"

    sizes = fmnist.layer_sizes(a.hidden)
    tr_x, tr_y, te_x, te_y = fmnist.load(a.data, a.test_limit)
    test_x, test_y = torch.from_numpy(te_x), torch.from_numpy(te_y)
    shard = fmnist.shard(len(tr_x), a.workers, a.rank, a.seed)
    steps = fmnist.steps_per_epoch(len(tr_x), a.workers, a.batch, a.steps_per_epoch)
    model = fmnist.make_model(sizes, fmnist.init_params(sizes, a.seed))
    grad_bytes = fmnist.num_params(sizes) * 4

    # Time in the all-reduces of a step: from the first gradient bucket being
    # ready (DDP's small first bucket: the last layers, early in the backward
    # pass) to the last one's completion, which the backward pass waits for.
    # It includes waiting for slower peers.
    comm = {"first": None, "last": None, "bytes": 0}
    if ddp:
        try:
            dist.init_process_group(
                "gloo", init_method=f"tcp://{a.master_addr}:{a.master_port}", rank=a.rank,
                world_size=a.workers, timeout=datetime.timedelta(seconds=a.init_timeout))
        except RuntimeError as e:
            raise SystemExit(f"worker {a.rank}: cannot join the gloo group at "
                             f"{a.master_addr}:{a.master_port} within {a.init_timeout:.0f} s: "
                             f"{e}")
        net = torch.nn.parallel.DistributedDataParallel(model, broadcast_buffers=False)

        def timed_allreduce(state, bucket):
            if comm["first"] is None:
                comm["first"] = time.monotonic()
            buf = bucket.buffer()
            buf.div_(a.workers)  # what DDP's default hook does: the mean

            def done(fut):
                comm["last"] = time.monotonic()
                comm["bytes"] += buf.numel() * buf.element_size()
                return fut.value()[0]
            return dist.all_reduce(buf, async_op=True).get_future().then(done)
        net.register_comm_hook(None, timed_allreduce)
    else:
        net = model
    # DDP averages: W x the per-worker rate gives libdsm's summed update (module doc).
    opt = torch.optim.SGD(model.parameters(), lr=a.lr * a.workers, momentum=a.momentum)

    total = a.epochs * steps
    lr_at = fmnist.lr_schedule(a, total)
    rec = fmnist.Recorder(a, sizes, steps, program, "ddp-gloo" if ddp else "none")
    evals = fmnist.eval_points(steps, a.evals_per_epoch)
    rng = np.random.default_rng(a.seed * 1000003 + a.rank)
    if not a.quiet:
        print(f"[{program} {a.rank}/{a.workers}] model mlp {fmnist.describe(sizes)}, "
              f"{len(shard)}-example shard, {steps} steps of {a.batch} per epoch, lr {a.lr:g} "
              f"x {a.workers} ({a.schedule}), momentum {a.momentum:g}", flush=True)
    def evaluate():
        return fmnist.evaluate(model, test_x, test_y)
    if a.rank == 0:  # the untrained model starts the curve, before the clock starts
        rec.curve.append({"wall_s": 0.0, "step": 0, "test_accuracy": evaluate()[0]})
    tx0 = tx_bytes(a.iface) if a.iface else None
    rec.begin()
    t = 0
    for epoch in range(1, a.epochs + 1):
        e = dict(epoch=epoch, compute_s=0.0, publish_s=0.0, wait_s=0.0, eval_s=0.0,
                 staleness_max=0, staleness_mean=0.0)
        epoch_start = time.monotonic()
        rng.shuffle(shard)
        loss_sum = 0.0
        for s in range(steps):
            t0 = time.monotonic()
            comm["first"] = comm["last"] = None
            idx = shard[s * a.batch:(s + 1) * a.batch]
            xb = torch.from_numpy(fmnist.standardise(tr_x[idx]))
            yb = torch.from_numpy(tr_y[idx].astype(np.int64))
            for g in opt.param_groups:
                g["lr"] = lr_at(t) * a.workers
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(net(xb), yb)
            loss.backward()  # with DDP: returns once the all-reduce is done
            opt.step()
            loss = float(loss)
            if not np.isfinite(loss):
                raise SystemExit(f"worker {a.rank}: loss is {loss} at step {t + 1}: diverged")
            loss_sum += loss
            t += 1
            t1 = time.monotonic()
            allreduce = comm["last"] - comm["first"] if comm["first"] is not None else 0.0
            rec.step(t1 - t0 - allreduce, allreduce, 0.0, 0, loss)
            e["compute_s"] += t1 - t0 - allreduce
            e["publish_s"] += allreduce
            if a.rank == 0 and (s + 1) in evals:
                rec.point(t, evaluate)
                e["eval_s"] += time.monotonic() - t1
        eval_start = time.monotonic()
        if a.rank == 0:
            e["test_accuracy"], e["test_loss"] = rec.point(t, evaluate)
        else:
            e["test_accuracy"] = None
        end = time.monotonic()
        e["eval_s"] += end - eval_start
        e.update(epoch_s=end - epoch_start, wall_s=rec.wall(), steps=steps,
                 train_loss=loss_sum / steps)
        e["versions_per_s"] = steps / e["epoch_s"]
        e["recv_versions_per_s"] = steps * (a.workers - 1) / e["epoch_s"]
        e["samples_per_s"] = steps * a.batch / e["epoch_s"]
        e["cluster_samples_per_s"] = steps * a.batch * a.workers / e["epoch_s"]
        rec.epoch(e)
    tx1 = tx_bytes(a.iface) if a.iface else None
    if ddp:
        ring = 2 * (a.workers - 1) / a.workers * grad_bytes
        rec.extra["wire"] = {
            "allreduce_bytes_per_step": comm["bytes"] / total,
            "ring_bytes_sent_per_step_per_worker": ring,
            "iface": a.iface or None,
            "tx_bytes": None if tx0 is None or tx1 is None else tx1 - tx0,
            "note": "gloo ring all-reduce: each worker sends 2(W-1)/W of the gradient "
                    "bucket per step; tx_bytes is the interface's counter over the "
                    "training (TCP/IP headers and acks included)",
        }
    rec.write()
    if ddp:
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
