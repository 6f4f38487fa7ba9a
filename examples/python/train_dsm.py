#!/usr/bin/env python3
"""Fashion-MNIST data-parallel SGD in PyTorch, the workers joined by libdsm.

The algorithm of examples/fashion_mnist/train.cpp, step for step. Worker k is
the single writer of the area "<prefix>/delta/<k>": its cumulative update,
the sum of every -lr * gradient step it has applied, as a float32 tensor over
the area itself (Writer.tensor(), no copy). It attaches the other workers'
areas read-only and reads them as tensors over the replicas (no copy). The
model it computes with is

    initial weights (same seed everywhere) + own delta + the others' deltas

as this process sees them. Each step: build that view, forward/backward on a
minibatch of the worker's shard, add -lr * grad to the own delta in place, log
the whole area, publish (version = steps done), service (the replicas move to
their newest versions), then the staleness bound (SSP): before step t+1, wait
until every other worker's version is >= t - S.

  python3 train_dsm.py --workers 3 --rank 0 --json w0.json   # one per host

scripts/train.sh --impl python runs it on the virtual cluster. See README.md.
"""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fmnist  # noqa: E402


def parse():
    p = fmnist.common_args(__doc__.splitlines()[0])
    p.add_argument("--staleness", type=int, default=3,
                   help="SSP bound: start step t+1 once every other worker published t-S")
    p.add_argument("--prefix", default="fmnist", help="area names are <prefix>/delta/<rank>")
    p.add_argument("--wait-timeout", type=float, default=60)
    p.add_argument("--attach-timeout", type=float, default=60)
    p.add_argument("--reader-buffers", type=int, default=3,
                   help="reader copies per host (3: a reader computing on one version "
                        "never holds up the daemon's next)")
    p.add_argument("--socket", default=None, help="dsmd's socket (default $DSM_SOCKET)")
    a = p.parse_args()
    fmnist.check_args(a)
    return a


class Worker:
    def __init__(self, a):
        import numpy as np
        import torch
        import libdsm
        self.a, self.np, self.torch, self.libdsm = a, np, torch, libdsm
        self.sizes = fmnist.layer_sizes(a.hidden)
        n = fmnist.num_params(self.sizes)
        self.tr_x, self.tr_y, te_x, te_y = fmnist.load(a.data, a.test_limit)
        self.test_x, self.test_y = torch.from_numpy(te_x), torch.from_numpy(te_y)
        self.shard = fmnist.shard(len(self.tr_x), a.workers, a.rank, a.seed)
        self.steps = fmnist.steps_per_epoch(len(self.tr_x), a.workers, a.batch,
                                            a.steps_per_epoch)
        self.w0 = fmnist.init_params(self.sizes, a.seed)
        self.model = fmnist.make_model(self.sizes, self.w0)
        self.view = self.model.flat  # the parameters' memory, outside autograd

        self.session = libdsm.Session(socket=a.socket)
        self.name = f"{a.prefix}/delta/{a.rank}"
        # Explicit logging, as the C++ example: every parameter changes each
        # step, so one log call of the whole area beats a page fault per page.
        self.own = self.session.alloc(self.name, (n,), np.float32, tracking="log",
                                      reader_buffers=a.reader_buffers)
        self.own.array[:] = 0  # a new area is not promised to be zero
        self.delta = self.own.tensor()
        self.others = {}
        for j in range(a.workers):
            if j == a.rank:
                continue
            name = f"{a.prefix}/delta/{j}"
            try:
                r = self.session.attach(name, (n,), np.float32, timeout=a.attach_timeout)
            except libdsm.Error as e:
                raise SystemExit(f"worker {a.rank}: cannot attach '{name}' of worker {j} "
                                 f"within {a.attach_timeout:.0f} s: {e} (is worker {j} "
                                 "running, with the same --prefix and --hidden?)")
            # A tensor over the replica itself: it shows the version this
            # process holds, and moves with it at each quiescent point.
            self.others[j] = (r, r.tensor(copy=False))
        self.velocity = torch.zeros(n) if a.momentum > 0 else None
        self.retries = 0

    def version_of(self, j):
        return self.others[j][0].version

    def assemble_view(self):
        torch = self.torch
        torch.add(self.w0, self.delta, out=self.view)
        for j, (r, t) in self.others.items():
            if r.version > 0:  # version 0: nothing published yet, contents undefined
                self.view.add_(t)

    def publish(self, v):
        deadline = time.monotonic() + self.a.wait_timeout
        while not self.own.publish():
            # Local readers hold every spare buffer; they move on at their next sync.
            if time.monotonic() > deadline:
                raise SystemExit(f"worker {self.a.rank}: publishing step {v}: readers held "
                                 f"every buffer for {self.a.wait_timeout:.0f} s")
            self.retries += 1
            time.sleep(0.0002)
        if self.own.version != v:
            raise SystemExit(f"worker {self.a.rank}: after step {v} '{self.name}' is at "
                             f"version {self.own.version}; expected one version per step")

    def wait_others(self, v, why, timeout=None, fatal=True):
        timeout = self.a.wait_timeout if timeout is None else timeout
        for j, (r, _) in self.others.items():
            if r.version >= v:
                continue
            try:
                r.wait_version(v, timeout=timeout)
            except self.libdsm.TimeoutError as e:
                st = r.status()
                msg = (f"worker {self.a.rank}: {why}: worker {j}'s update is at version "
                       f"{r.version} (latest on this host {st['latest_version']}), needed {v} "
                       f"within {timeout:.0f} s; its writer is "
                       f"{'reported alive' if st['writer_alive'] else 'gone'}, its data "
                       f"{st['staleness_ns'] / 1e9:.1f} s old: {e}")
                if fatal:
                    raise SystemExit(msg)
                print("warning: " + msg, file=sys.stderr)
                return False
        return True

    def evaluate(self):
        return fmnist.evaluate(self.model, self.test_x, self.test_y)

    def run(self):
        a, np, torch = self.a, self.np, self.torch
        F = torch.nn.functional
        total = a.epochs * self.steps
        lr_at = fmnist.lr_schedule(a, total)
        rec = fmnist.Recorder(a, self.sizes, self.steps, "libdsm-torch", "libdsm")
        evals = fmnist.eval_points(self.steps, a.evals_per_epoch)
        rng = np.random.default_rng(a.seed * 1000003 + a.rank)
        if not a.quiet:
            print(f"[libdsm-torch {a.rank}/{a.workers}] model mlp {fmnist.describe(self.sizes)}, "
                  f"{len(self.shard)}-example shard, {self.steps} steps of {a.batch} per epoch, "
                  f"lr {a.lr:g} ({a.schedule}), momentum {a.momentum:g}, staleness bound "
                  f"{a.staleness}, area '{self.name}' ({self.own.nbytes / 2**20:.1f} MiB)",
                  flush=True)
        t = 0  # steps done == own version
        if a.rank == 0:  # the untrained model starts the curve, before the clock starts
            self.assemble_view()
            rec.curve.append({"wall_s": 0.0, "step": 0, "test_accuracy": self.evaluate()[0]})
        rec.begin()
        for epoch in range(1, a.epochs + 1):
            e = dict(epoch=epoch, compute_s=0.0, publish_s=0.0, wait_s=0.0, eval_s=0.0,
                     staleness_max=0)
            epoch_start = time.monotonic()
            seen_start = sum(self.version_of(j) for j in self.others)
            rng.shuffle(self.shard)
            loss_sum, stale_sum, stale_n = 0.0, 0, 0
            for s in range(self.steps):
                t0 = time.monotonic()
                step_stale = 0
                for j in self.others:
                    d = max(0, t - self.version_of(j))
                    step_stale = max(step_stale, d)
                    stale_sum += d
                    stale_n += 1
                self.assemble_view()
                idx = self.shard[s * a.batch:(s + 1) * a.batch]
                xb = torch.from_numpy(fmnist.standardise(self.tr_x[idx]))
                yb = torch.from_numpy(self.tr_y[idx].astype(np.int64))
                lr = lr_at(t)
                loss = F.cross_entropy(self.model(xb), yb)
                loss.backward()
                with torch.no_grad():
                    # -lr * gradient straight into the area, parameter by parameter.
                    for p, off, count in self.model.ranges:
                        g = p.grad.view(-1)
                        if self.velocity is not None:
                            v = self.velocity[off:off + count]
                            g = v.mul_(a.momentum).add_(g)
                        self.delta[off:off + count].add_(g, alpha=-lr)
                        p.grad = None  # the next backward hands over fresh tensors
                loss = float(loss)
                if not np.isfinite(loss):
                    raise SystemExit(f"worker {a.rank}: loss is {loss} at step {t + 1}: "
                                     "diverged (lower --lr)")
                loss_sum += loss
                t1 = time.monotonic()
                self.own.log()  # every parameter moved: the whole area is the version
                self.publish(t + 1)
                t += 1
                self.session.service()  # the others' replicas move to their newest versions
                t2 = time.monotonic()
                if t > a.staleness:
                    self.wait_others(t - a.staleness, "staleness bound")
                t3 = time.monotonic()
                rec.step(t1 - t0, t2 - t1, t3 - t2, step_stale, loss)
                e["compute_s"] += t1 - t0
                e["publish_s"] += t2 - t1
                e["wait_s"] += t3 - t2
                e["staleness_max"] = max(e["staleness_max"], step_stale)
                if a.rank == 0 and (s + 1) in evals:
                    self.assemble_view()
                    rec.point(t, self.evaluate)
                    e["eval_s"] += time.monotonic() - t3
            train_end = time.monotonic()
            last = epoch == a.epochs
            if last:
                self.wait_others(t, "final barrier (every worker's last update)")
                # Version t+1, same content: "I hold every worker's final update".
                self.own.log(0)
                self.publish(t + 1)
            seen_end = sum(min(self.version_of(j), t) for j in self.others)
            eval_start = time.monotonic()
            e["wait_s"] += eval_start - train_end
            if a.rank == 0:
                self.assemble_view()
                e["test_accuracy"], e["test_loss"] = rec.point(t, self.evaluate)
            else:
                e["test_accuracy"] = None
            end = time.monotonic()
            e["eval_s"] += end - eval_start
            e.update(epoch_s=end - epoch_start, wall_s=rec.wall(), steps=self.steps,
                     train_loss=loss_sum / self.steps,
                     staleness_mean=stale_sum / stale_n if stale_n else 0.0)
            e["versions_per_s"] = self.steps / e["epoch_s"]
            e["recv_versions_per_s"] = (seen_end - seen_start) / e["epoch_s"]
            e["samples_per_s"] = self.steps * a.batch / e["epoch_s"]
            e["cluster_samples_per_s"] = ((self.steps + seen_end - seen_start) * a.batch
                                          / e["epoch_s"])
            rec.epoch(e)
        rec.extra["publish_busy_retries"] = self.retries
        st = self.own.status()
        rec.extra["own_area"] = {"version": st["version"],
                                 "publishes_deferred": st.get("publishes_deferred", 0)}
        rec.write()
        # Stay until every other worker holds the final model (their version t+1).
        self.wait_others(t + 1, "leaving (other workers' done marks)",
                         timeout=min(a.wait_timeout, fmnist.LEAVE_TIMEOUT_S), fatal=False)

    def close(self):
        # The tensors over the areas keep them mapped: drop them, so that the
        # areas are freed (and the last versions drained to the other hosts)
        # here rather than at some point of the interpreter's exit.
        for r, _ in self.others.values():
            r.close()
        self.others.clear()
        self.delta = None
        self.own.close()
        self.session.close()


def main():
    a = parse()
    fmnist.limit_threads(a.threads)
    import torch
    torch.set_num_threads(a.threads)
    w = Worker(a)
    w.run()
    w.close()


if __name__ == "__main__":
    main()
