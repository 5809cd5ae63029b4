"""Placement: turn a policy's priority order into GPU slots.

Rules: a job of up to K GPUs (K = GPUs per node) sits on one node; a larger elastic
job takes whole nodes that split its count evenly (the service sets its count per
node, and Slurm gives every node of such a job the same count); a larger fixed job
takes GPUs node after node by name until they hold enough, as Slurm spreads a
``--gpus=N`` (5 on nodes of 4: 4 + 1; in the simulator whole nodes, the last one's
other GPUs held idle with it); a fixed job that asked for several nodes (``JobSpec.nodes``: ``-N 2
--gres=gpu:4``) takes its count on each of that many. Running jobs keep their GPUs when
they stay selected, so a round does not migrate work needlessly. Selection is greedy by
count in the plan's order; a selected job that fragmentation leaves without room gets
nodes cleared for it when that runs more of the selection (the running jobs there
move), otherwise it is skipped and later jobs backfill (a running one on its own GPUs
when they are free). An elastic job takes the count the plan gives it (``Plan.gpus``); a
running one placed on another count is resized (diff: a preempt plus a start).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from slurm_shockwave.model.cluster import SEVERAL_TYPES, ClusterView, slot_node
from slurm_shockwave.model.job import Job, JobId
from slurm_shockwave.model.lifecycle import Phase
from slurm_shockwave.model.plan import Plan


@dataclass
class Placement:
    slots: dict[JobId, tuple[str, ...]] = field(default_factory=dict)
    fragmented: set[JobId] = field(default_factory=set)
    moved_for: dict[JobId, JobId] = field(default_factory=dict)
    """Each running job moved to clear a node, and the first-ranked job that took GPUs
    there (its reason names it: an owner asks first why a running job restarted)."""

    def moves(self, job: Job) -> bool:
        """A running job placed on other GPUs than it holds: a migration or a resize,
        i.e. a checkpoint here and a restart there."""
        slots = self.slots.get(job.job_id)
        return job.is_running and slots is not None and slots != job.gpu_slots

    def takes(self, job: Job) -> bool:
        """The job is placed on a GPU it does not hold: a start, a move or a grow (a
        shrink in place takes none)."""
        slots = self.slots.get(job.job_id)
        return slots is not None and not set(slots) <= set(job.gpu_slots)


def _held_whole(spans: int, exact: bool, may: bool = True) -> bool:
    """Whether a job on ``spans`` nodes holds them whole, the GPUs it does not use with
    them: in the simulator only (``exact``: live, Slurm lends the rest out), and not a
    fixed job spread over the nodes it asked for (``may`` False; ``_FreeSlots.take_exact``)."""
    return may and spans > 1 and not exact


class _FreeSlots:
    def __init__(self, view: ClusterView) -> None:
        self.per_node = view.gpus_per_node
        self.free: dict[str, list[str]] = {n.name: list(n.slots()) for n in view.nodes}
        self.size = {n.name: n.gpus for n in view.nodes}
        self.total = sum(self.size.values())
        self.kind = {n.name: n.gpu_type for n in view.nodes}
        self.exact = view.exact_slots

    def _open(self, kind: str) -> dict[str, list[str]]:
        """The free slots of the nodes a job asking GPU type ``kind`` may run on (all for
        "": Slurm gives a job that names a type only GPUs of that type)."""
        return self.free if not kind else {n: s for n, s in self.free.items()
                                           if self.kind[n] in (kind, SEVERAL_TYPES)}

    def on_one_node(self, gpus: int, kind: str, spreads: bool, min_nodes: int = 0) -> bool:
        """Whether a job of ``gpus`` (no ``-N`` of its own) goes on one node: one asked per
        node (not ``spreads``) always; one that may be spread (``JobSpec.spreads``), unless
        it must have several (``min_nodes``), when no wider than the cluster's widest
        usable node, or for a typed one, its type's
        widest (a ``--gpus=v100:8`` job on nodes of 4 v100 looked for one node of 8,
        another type's, and never started; Slurm spreads it 4 + 4), or that of nodes of
        several types where the type has none of its own. The one rule of ``take`` and
        of the nodes defragmentation clears (``_cleared_shape``)."""
        if not spreads:
            return True
        if min_nodes > 1:
            return False
        if not kind:
            return gpus <= self.per_node
        own = [n for n in self.free if self.kind[n] == kind]
        return gpus <= max((self.size[n] for n in (own or self._open(kind))), default=0)

    def take_exact(self, slots: tuple[str, ...], whole: bool = True) -> bool:
        """These slots, if all free. In the simulator a job on several nodes takes them
        whole, the GPUs it does not use with them, as ``take`` gave them: kept only its
        own, a 12-GPU job on nodes of 8 idled 4 in its first round and lent them out from
        its second. Live (``ClusterView.exact_slots``) its slots are what Slurm gave it,
        and Slurm lends the rest of its nodes out: held whole, a ``--gpus=5`` job run as
        4 + 1 kept 3 GPUs idle all its run (a red-team). Not ``whole``: a fixed job spread
        over the nodes it asked for holds only its own GPUs there (``-N 2 --gres=gpu:4``
        leaves 4 of each node of 8 to other jobs)."""
        by_node: dict[str, list[str]] = {}
        for s in slots:
            by_node.setdefault(slot_node(s), []).append(s)
        for node, wanted in by_node.items():
            have = self.free.get(node)
            if have is None or not set(wanted).issubset(have):
                return False
        whole = _held_whole(len(by_node), self.exact, whole)
        for node, wanted in by_node.items():
            gone = set(wanted)  # a set: a pool node holds hundreds of slots
            left = [] if whole else [s for s in self.free[node] if s not in gone]
            self.total -= len(self.free[node]) - len(left)
            self.free[node] = left
        return True

    def take(self, gpus: int, nodes: int = 0, *, even: bool = False,
             kind: str = "", spreads: bool = True, max_nodes: int = 0, min_nodes: int = 0
             ) -> tuple[str, ...] | None:
        """``gpus`` slots: on one node (best fit) where they fit on one; for a job that
        asked for ``nodes`` nodes (a fixed ``-N``), gpus/nodes on each of that many;
        wider than a node, whole nodes: split evenly for an elastic job (``even``: the
        service sets its count per node, ``_whole_nodes``), else taken by name until they
        hold enough, as Slurm spreads a fixed ``--gpus=N`` (5 on nodes of 4: 4 + 1).
        ``kind``: only on nodes of that GPU type. Not ``spreads`` (asked per node): on one
        node or none. Live (``exact``), a fixed job that may be spread and fits no one node
        (or is wider than any) takes free GPUs node after node, as Slurm gives them, on at
        most ``max_nodes`` nodes where it has a limit; one that must have ``min_nodes``,
        on at least that many, live or not."""
        free = self._open(kind)
        if nodes > 1:
            return self._spread(gpus, nodes, free)
        if self.on_one_node(gpus, kind, spreads, min_nodes):
            fits = [n for n, s in free.items() if len(s) >= gpus]
            if not fits:
                # live, a per-job request no node has room for goes where GPUs are
                # free, as Slurm spreads it (4 + 4 over two half-used nodes of 8)
                return self._by_name(gpus, free, max_nodes) \
                    if spreads and self.exact and not even else None
            node = min(fits, key=lambda n: (len(self.free[n]), n))  # best fit
            got, self.free[node] = self.free[node][:gpus], self.free[node][gpus:]
            self.total -= gpus
            return tuple(got)
        # spread over its own type's nodes where it has any: a node of several types
        # holds an unknown count of each, and 7 of one such node + 1 was never Slurm's
        own = {n: s for n, s in free.items() if self.kind[n] == kind} if kind else free
        pool = own if own else free
        if even:
            return self._whole_nodes(gpus, pool)
        if min_nodes > 1:  # over all its nodes: a type's own may be fewer (a review)
            return self._by_name(gpus, free, max_nodes, min_nodes)
        # live, over free GPUs as Slurm spreads it; the simulator's, over whole nodes
        return self._by_name(gpus, pool, max_nodes) if self.exact \
            else self._whole_nodes_by_name(gpus, pool)

    def _by_name(self, gpus: int, free: dict[str, list[str]], max_nodes: int = 0,
                 min_nodes: int = 0) -> tuple[str, ...] | None:
        """Free slots node after node by name until they hold ``gpus``; with ``max_nodes``,
        on that many of the nodes with the most free (Slurm gives a ``-N 1-2`` job no
        third node); with ``min_nodes``, one on each of the first that many with a free
        GPU before the rest (``JobSpec.min_nodes``: Slurm's split of ``-N 2 --gpus=7``)."""
        if max_nodes:
            free = dict(sorted(free.items(), key=lambda ns: (-len(ns[1]), ns[0]))[:max_nodes])
        names = sorted(n for n, s in free.items() if s)
        if sum(len(free[n]) for n in names) < gpus or not min_nodes <= len(names) \
                or min_nodes > gpus:
            return None
        count = dict.fromkeys(names[:min_nodes] if min_nodes > 1 else (), 1)
        left = gpus - len(count)
        for n in names:
            more = min(len(self.free[n]) - count.get(n, 0), left)
            count[n] = count.get(n, 0) + more
            left -= more
        taken: list[str] = []
        for n in names:
            got, self.free[n] = self.free[n][:count[n]], self.free[n][count[n]:]
            taken += got
        self.total -= gpus
        return tuple(taken)

    def _spread(self, gpus: int, nodes: int, free: dict[str, list[str]]
                ) -> tuple[str, ...] | None:
        """The same count on each of ``nodes`` nodes, as Slurm places ``-N 2
        --gres=gpu:4`` (4 + 4), on the nodes with the fewest free GPUs that have room
        (best fit). Before, such a job was placed as 8 GPUs on one node, which Slurm
        never does, and the plan gave out GPUs the job was to hold."""
        per = gpus // nodes
        if per * nodes != gpus:
            return None
        fits = sorted((n for n, s in free.items() if len(s) >= per),
                      key=lambda n: (len(self.free[n]), n))[:nodes]
        return None if len(fits) < nodes else self._take_on(fits, per, whole=False)

    def _take_on(self, names: list[str], per: int, *, whole: bool) -> tuple[str, ...]:
        """``per`` slots of each of ``names``; ``whole``: the nodes' other slots too (a
        job on several nodes holds them whole, ``take_exact``)."""
        taken: list[str] = []
        for n in names:
            taken += self.free[n][:per]
            left = [] if whole else self.free[n][per:]
            self.total -= len(self.free[n]) - len(left)
            self.free[n] = left
        return tuple(taken)

    def _whole_nodes_by_name(self, gpus: int, free: dict[str, list[str]]
                             ) -> tuple[str, ...] | None:
        """Whole free nodes by name until they hold ``gpus``: the last may give fewer."""
        names: list[str] = []
        held = 0
        for n in sorted(n for n, s in free.items() if s and len(s) == self.size[n]):
            if held >= gpus:
                break
            names.append(n)
            held += len(self.free[n])
        if held < gpus:
            return None
        taken = self._take_on(names, max(self.size.values()), whole=True)
        return taken[:gpus]

    def _whole_nodes(self, gpus: int, free: dict[str, list[str]]) -> tuple[str, ...] | None:
        """Whole free nodes for a job wider than a node, the same count on each: Slurm
        gives every node of a job the same count (``numnodes=K-K gres=gpu:G/K``). The
        fewest nodes that split ``gpus`` evenly and each hold their share, the smallest
        such nodes first: 16 as 8 + 8 on nodes of 6, 8 and 8, where whole nodes taken by
        name until they held enough gave 6 + 8 + 2, which the world had to refuse."""
        whole = [n for n, s in free.items() if s and len(s) == self.size[n]]
        for count in range(max(-(-gpus // max(self.per_node, 1)), 2), len(whole) + 1):
            per = gpus // count
            if per * count != gpus:
                continue
            fits = sorted((n for n in whole if self.size[n] >= per),
                          key=lambda n: (self.size[n], n))[:count]
            if len(fits) == count:
                return self._take_on(fits, per, whole=True)
        return None


def _take(free: _FreeSlots, job: Job, gpus: int) -> tuple[str, ...] | None:
    """``gpus`` free slots for ``job``, as Slurm would give them (``_FreeSlots.take``)."""
    return free.take(gpus, _nodes(job), even=job.spec.is_elastic, kind=job.spec.gpu_type,
                     spreads=job.spec.spreads, max_nodes=job.spec.max_nodes,
                     min_nodes=job.spec.min_nodes)


def _cleared_shape(job: Job, wanted: int, free: _FreeSlots) -> tuple[int, int]:
    """How a job would sit on nodes cleared for it: (nodes, GPUs each) for a job on a
    fixed count of nodes (its ``-N``, or one where a node of its type can hold it), so
    only nodes that wide are cleared; (0, 0) for one spread over whole nodes until they
    hold enough. Before, the count was the job over the cluster's widest node, whatever
    its type: one v100 node of 4 was cleared for a ``v100:8`` job, which could not help."""
    nodes = _nodes(job)
    if nodes > 1:
        return nodes, wanted // nodes
    if free.on_one_node(wanted, job.spec.gpu_type, job.spec.spreads, job.spec.min_nodes):
        return 1, wanted
    return 0, 0


def _nodes(job: Job) -> int:
    """The nodes a fixed job asked for (``JobSpec.nodes``); 0 for an elastic job, whose
    node count the service sets with its count."""
    return 0 if job.spec.is_elastic else job.spec.nodes


def _stays(job: Job, want: Mapping[JobId, int], free: _FreeSlots) -> bool:
    """A running job keeps its GPUs (takes them from ``free``) when the plan keeps its
    count and they are still free."""
    return (job.is_running and len(job.gpu_slots) == want[job.job_id]
            and free.take_exact(job.gpu_slots, whole=_nodes(job) <= 1))


def _place_selected(view: ClusterView, selected: list[Job], want: Mapping[JobId, int],
                    cleared: frozenset[str] = frozenset()) -> tuple[Placement, _FreeSlots]:
    """Selected running jobs keep their GPUs (except on ``cleared`` nodes, or when the
    plan resizes them: ``want`` is each job's count), then the others take GPUs largest
    first (hardest to fit)."""
    free = _FreeSlots(view)
    out = Placement()
    for job in selected:
        if not cleared.intersection(map(slot_node, job.gpu_slots)) and _stays(job, want, free):
            out.slots[job.job_id] = job.gpu_slots
    for job in sorted(selected, key=lambda j: -want[j.job_id]):
        if job.job_id in out.slots:
            continue
        got = _take(free, job, want[job.job_id])
        if got is None:
            out.fragmented.add(job.job_id)
        else:
            out.slots[job.job_id] = got
    return out, free


def _defragment(view: ClusterView, selected: list[Job], want: Mapping[JobId, int],
                out: Placement, free: _FreeSlots, *,
                moves_for: frozenset[JobId] = frozenset(),
                pinned: frozenset[JobId] = frozenset()
                ) -> tuple[Placement, _FreeSlots]:
    """Selected jobs that fragmentation left out (small jobs scattered over every node, so
    no node has room for a wide one) get nodes cleared for them: nodes whose running jobs
    all come later in the plan's order (a job never displaces one the policy ranks above
    it, so a policy that runs the running jobs first, FIFO's, never moves one), those
    holding the fewest GPUs first; their jobs move elsewhere. For a job in ``moves_for``
    (Plan.moves_for) any node may be cleared, nodes of later jobs first: a job ranked
    above it is moved, not stopped; a node holding a ``pinned`` job is never cleared.
    A job that names a GPU type has nodes of its type cleared, not the others (it cannot
    run there). Kept only when every job placed before still is and more of the selection
    runs; without it a wide job can wait until the cluster drains."""
    rank = {j.job_id: i for i, j in enumerate(selected)}
    jobs = {j.job_id: j for j in selected}
    held: dict[str, list[JobId]] = {n.name: [] for n in view.nodes}
    for jid, slots in out.slots.items():
        if jobs[jid].is_running:
            for node in {slot_node(s) for s in slots}:
                held[node].append(jid)
    used = {n: sum(len(jobs[j].gpu_slots) for j in jids) for n, jids in held.items()}
    cleared: set[str] = set()
    for jid in sorted(out.fragmented, key=lambda j: (-want[j], rank[j])):
        later = {n: all(rank[j] > rank[jid] for j in jids) for n, jids in held.items()}
        count, per = _cleared_shape(jobs[jid], want[jid], free)
        kind = jobs[jid].spec.gpu_type
        movable = sorted((n for n in held if n not in cleared and free.size[n] >= per
                          and (not kind or free.kind[n] in (kind, SEVERAL_TYPES))
                          and (jid in moves_for or later[n])
                          and not pinned.intersection(held[n])),
                         key=lambda n: (not later[n], used[n], n))
        if count:
            if len(movable) >= count:
                cleared.update(movable[:count])
            continue
        took: list[str] = []
        for n in movable:  # whole nodes until they hold enough
            if sum(free.size[t] for t in took) >= want[jid]:
                break
            took.append(n)
        if sum(free.size[t] for t in took) >= want[jid]:
            cleared.update(took)
    if not cleared:
        return out, free
    again, left = _place_selected(view, selected, want, frozenset(cleared))

    def placed(p: Placement) -> int:
        return sum(want[j] for j in p.slots)

    if not (set(out.slots) <= set(again.slots) and placed(again) > placed(out)):
        return out, free
    # a moved job names the first-ranked job that took GPUs on its node (the job the
    # node was cleared for may have been placed elsewhere, or still wait)
    taker: dict[str, JobId] = {}
    for j in sorted(again.slots, key=rank.__getitem__, reverse=True):
        taker.update(dict.fromkeys({slot_node(s) for s in again.slots[j]}
                                   - {slot_node(s) for s in jobs[j].gpu_slots}, j))
    again.moved_for = {j: taker[n] for n in cleared if n in taker for j in held[n]
                       if again.slots.get(j, jobs[j].gpu_slots) != jobs[j].gpu_slots}
    return again, left


def _narrower(job: Job, wanted: int, free: _FreeSlots) -> tuple[str, ...] | None:
    """GPUs for an elastic job that fragmentation left out at the plan's count: the widest
    of its smaller counts that fits (its own GPUs where it runs on that count), so the GPUs
    a grown count could not use do not idle while it waits. None for a fixed job."""
    for count in sorted((c for c in job.spec.gpu_counts() if c < wanted), reverse=True):
        if len(job.gpu_slots) == count and free.take_exact(job.gpu_slots):
            return job.gpu_slots
        got = _take(free, job, count)
        if got is not None:
            return got
    return None


def place(view: ClusterView, plan: Plan) -> Placement:
    jobs = view.by_id()
    order: list[Job] = [jobs[j] for j in plan.order if j in jobs]
    want = {job.job_id: plan.gpus_of(job, keep_running=view.exact_slots) for job in order}
    capacity = view.total_gpus
    selected: list[Job] = []
    used = 0
    for job in order:
        if used + want[job.job_id] <= capacity:
            selected.append(job)
            used += want[job.job_id]
    out, free = _place_selected(view, selected, want)
    if out.fragmented:
        out, free = _defragment(view, selected, want, out, free, moves_for=plan.moves_for)
    # Backfill what fragmentation left, in plan order; a running job stays where it runs
    # if it still can (best fit alone may swap two running jobs: a needless migration).
    # An elastic job left out takes the widest of its smaller counts that fits, where the
    # policy chose its count: a fixed baseline's (FIFO's: Slurm alone's model) waits at its
    # request, as Slurm would (a live run's simulation of Slurm alone narrowed one)
    if out.fragmented:
        for job in order:
            if free.total == 0:
                break
            if job.job_id in out.fragmented:
                got = (_narrower(job, want[job.job_id], free) if job.job_id in plan.gpus
                       else None)
                if got is not None:
                    out.slots[job.job_id] = got
                    out.fragmented.discard(job.job_id)
                continue
            if job.job_id in out.slots or want[job.job_id] > free.total:
                continue
            if _stays(job, want, free):
                out.slots[job.job_id] = job.gpu_slots
                continue
            got = _take(free, job, want[job.job_id])
            if got is not None:
                out.slots[job.job_id] = got
    if plan.avoid_idle:
        if out.fragmented:
            out = _fill_idle(view, order, want, out, free, plan.moves_for)
        out = _keep_running(view, order, want, out, plan)
    return out


def _keep_running(view: ClusterView, order: list[Job], want: Mapping[JobId, int],
                  out: Placement, plan: Plan) -> Placement:
    """``Plan.avoid_idle``: a running job left out keeps its GPUs (widest first) where
    the only jobs placed on them are starts that use no other GPUs and fewer of its:
    stopping it would idle the rest for the round. Those starts then take free GPUs
    elsewhere if they can, in the plan's order, or wait. Seen in the simulator on
    s0_40x16 at time scale 12: an 8-GPU job stopped at its lease's end for a 4-GPU
    start left 4 GPUs idle for three rounds.

    Never held back: a start of the critical path (``moves_for``), one released for GPUs
    a checkpoint frees (``view.reserved``), or one further behind its fair finish time
    than the running job (``Plan.rho``), which could otherwise wait as long as a job the
    plan ranks last runs. A job already checkpointing is not kept (its requeue is under
    way), nor an elastic job the plan resizes. In the simulator a placed job on several
    nodes holds them whole (``_FreeSlots.take_exact``), the GPUs it does not use too: a
    job kept there shared a node with it (a red-team)."""
    jobs = view.by_id()
    on_node = {n.name: n.slots() for n in view.nodes}
    owner: dict[str, JobId] = {}
    for jid, slots in out.slots.items():
        nodes = {slot_node(s) for s in slots}
        whole = _held_whole(len(nodes), view.exact_slots, _nodes(jobs[jid]) <= 1)
        owner.update(dict.fromkeys((x for n in nodes for x in on_node[n]) if whole
                                   else slots, jid))
    never = plan.moves_for | view.reserved
    held_back: set[JobId] = set()
    for job in sorted((j for j in view.jobs if j.phase == Phase.RUNNING
                       and j.job_id not in out.slots),
                      key=lambda j: (-len(j.gpu_slots), j.job_id)):
        mine = set(job.gpu_slots)
        if want.get(job.job_id, len(mine)) != len(mine):
            continue
        takers = {owner[s] for s in mine if s in owner}
        behind = plan.rho.get(job.job_id, 0.0)
        if (any(jobs[t].is_running or t in never or not set(out.slots[t]) <= mine
                or plan.rho.get(t, 0.0) > behind for t in takers)
                or sum(len(out.slots[t]) for t in takers) >= len(mine)):
            continue
        for t in takers:
            del out.slots[t]
        held_back |= takers
        out.slots[job.job_id] = job.gpu_slots
        owner.update(dict.fromkeys(mine, job.job_id))
    if held_back:
        free = _FreeSlots(view)
        for jid, slots in out.slots.items():
            free.take_exact(slots, whole=_nodes(jobs[jid]) <= 1)
        for job in order:
            if job.job_id in held_back:
                got = _take(free, job, want[job.job_id])
                if got is not None:
                    out.slots[job.job_id] = got
    return out


def _fill_idle(view: ClusterView, order: list[Job], want: Mapping[JobId, int],
               out: Placement, free: _FreeSlots, pinned: frozenset[JobId]) -> Placement:
    """``Plan.avoid_idle``: each job still left out by fragmentation while at least its
    count of GPUs idles gets a node cleared of running jobs (ranked above it too, but not
    ``pinned`` ones), which move to other GPUs; kept only when every job placed before
    still is. Without it those GPUs idle until a node drains, rounds on end
    (docs/evaluation.md, "GPUs that would idle")."""
    for job in order:
        jid = job.job_id
        if jid not in out.fragmented or free.total < want[jid]:
            continue
        # the placed jobs at the counts they got (an elastic one may run narrower)
        counts = {**{j: len(s) for j, s in out.slots.items()}, jid: want[jid]}
        chosen = [j for j in order if j.job_id in counts]
        again, left = _place_selected(view, chosen, counts)
        if jid in again.fragmented:
            again, left = _defragment(view, chosen, counts, again, left,
                                      moves_for=frozenset({jid}), pinned=pinned)
        if jid in again.slots and set(out.slots) <= set(again.slots):
            again.fragmented = out.fragmented - {jid}
            out, free = again, left
    return out
