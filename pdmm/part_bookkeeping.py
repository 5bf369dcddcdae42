"""The bookkeeping of a rank's part on the partitioned engine (docs/guide/distributed.md, "What runs on the engine"):
pdmm.loop's Bookkeeping with every norm, count and privacy sum taken over all ranks' nodes and edges, each row's in
one all-reduce, so that every rank records the history one process records and takes the same stopping decision.
"""

from collections.abc import Callable

import torch

from .collectives import all_sum
from .loop import COUNTS, PRIVACY, Bookkeeping
from .network import gaps_of_sums, privacy_sums


class Summed:
    """The whole problem's local function as the bookkeeping sees it: global shape, value summed over the ranks."""

    def __init__(self, local, n, group):
        self.local, self.group = local, group
        self.shape = (n, *local.shape[1:])

    def value(self, x):
        return all_sum(self.local.value(x).contiguous(), self.group)


class PartBookkeeping(Bookkeeping):
    """solve's bookkeeping with every norm summed over the ranks (residuals over each rank's forward edges), and
    the ranks' Ctrl-C flags (asked(), set by solve) summed with them: `interrupted` is whether any rank was asked to
    stop."""

    asked: Callable[[], bool]  # set by run(): whether this rank was asked to stop

    def part(self, own, undirected, group):
        """own: this rank's node ids (n_r,) int64 on the run's device; undirected: the whole graph's edge count."""
        self.own, self.undirected, self.group = own, undirected, group
        self.star_own = None if self.x_star is None else self.x_star[self.own]

    def objective(self, x):
        """As Bookkeeping.objective, from the whole x (every rank's nodes, gathered, in the graph's node order): this
        rank's nodes' sum, summed over the ranks."""
        return super().objective(x.index_select(0, self.own))

    def residual(self, x, seen):
        """As Bookkeeping.residual over every rank's forward edges (x_j through the node halo, EdgeMatrices' and
        Consensus' far_end), with the stopping test's feasibility (each row relative to its size, EdgeMatrices.
        row_size) summed in the same all-reduce."""
        if "residual" not in seen:
            rows, row_size = self.edges.residual(x), self.edges.row_size
            squares = [(rows * rows).sum((0, 2))]
            if row_size is not None:
                relative = rows / row_size
                squares.append((relative * relative).sum((0, 2)))
            norms = torch.sqrt(all_sum(torch.cat(squares), self.group) / self.undirected).split(x.shape[1])
            seen["residual"], seen["feasible"] = norms[0], norms[-1]
        return seen["residual"]

    def feasibility(self, x, seen):
        """As Bookkeeping.feasibility over every rank's forward edges (residual sums both)."""
        self.residual(x, seen)
        return seen["feasible"]

    def error(self, x, seen):
        if "error" not in seen:
            d = x - self.star_own
            seen["error"] = torch.sqrt(all_sum((d * d).sum((0, 2)), self.group)) / self.x_star_norm
        return seen["error"]

    def network_row(self, x):
        """As Bookkeeping.network_row over all ranks' nodes and edges: the counts of each rank's receiving edges and
        the sums of squares behind the privacy measures (pdmm.network.privacy_sums) summed in one all-reduce per
        recorded row, the measures then taken from the sums as one process takes them (docs/guide/distributed.md,
        "What runs on the engine")."""
        counts = [name for name in COUNTS if name in self.columns]
        private = PRIVACY[0] in self.columns or PRIVACY[1] in self.columns
        parts = [getattr(self.channel, name) for name in counts]
        if private:
            sums = privacy_sums(x, self.channel.sent, self.private, self.edges, self.rho)
            parts += [s.to(torch.float64) for s in sums]
        summed = all_sum(torch.cat(parts), self.group).split(x.shape[1])
        row = dict(zip(counts, summed, strict=False))  # summed: the counts, then the privacy sums
        if private:
            sums = (t.to(x.dtype) for t in summed[len(counts) :])  # the measures in the run's dtype, as one process's
            row.update(zip(PRIVACY, gaps_of_sums(*sums, self.local.shape[0], 2 * self.undirected), strict=True))
        return row

    def sizes(self, x, x_old):
        """As Bookkeeping.sizes over all ranks' nodes: the sums of squares and the non-finite count, one
        all-reduce, which also sums the ranks' Ctrl-C flags into `asking` (check() reads it with the test)."""
        change = x - x_old
        sums = all_sum(
            torch.cat(
                [
                    (x * x).sum((0, 2)),
                    (change * change).sum((0, 2)),
                    (~torch.isfinite(x)).sum().reshape(1).to(x.dtype),
                    x.new_tensor([float(self.asked())]),
                ]
            ),
            self.group,
        )
        B, n = x.shape[1], self.local.shape[0]
        self.asking = sums[-1]  # read by check() with its other values: no host sync here
        return torch.sqrt(sums[:B] / n), torch.sqrt(sums[B : 2 * B] / n), sums[-2] == 0

    def state_sizes(self, t, t_old):
        """As Bookkeeping.state_sizes over all ranks' rows of t (each rank's edges or nodes), one all-reduce."""
        change = t - t_old
        sums = all_sum(
            torch.cat([(t * t).sum((0, 2)), (change * change).sum((0, 2)), t.new_tensor([len(t)])]), self.group
        )
        B, rows = t.shape[1], sums[-1].clamp(min=1)
        return torch.sqrt(sums[:B] / rows), torch.sqrt(sums[B : 2 * B] / rows)
