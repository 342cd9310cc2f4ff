"""One decoding step over the running batch, and the device-side state it works on.

`DecodeBatch` owns the rows that are decoding now (``active``, packed in slots ``[0, B)``), their
KV cache (`SlotKV` and the cache object the model writes into), the per-row device columns
(`RowTable`) and the sampling generator. The engine's loop thread calls `DecodeBatch.step` once per
iteration with the requests it just admitted: they are prefilled and joined, every row gets one
token, and finished rows leave. Nothing here takes a lock or decides who is admitted; that is the
engine's job (`core.InferenceEngine`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from verifiers.inference.engine.cuda_graphs import GraphedDecode
from verifiers.inference.engine.cuda_graphs import why_not as graphs_why_not
from verifiers.inference.engine.fast_decode import FastDecoder, why_not
from verifiers.inference.engine.kv import RowTable, SlotKV
from verifiers.inference.engine.kv_budget import Budget
from verifiers.inference.engine.outputs import advance, output
from verifiers.inference.engine.requests import PrefillPlan, Request, Seq, batched_wakeups, step_error
from verifiers.inference.engine.sampling import RowSampling

# Per-row device columns of the running batch (name -> torch dtype name).
_ROW_COLUMNS = {
    "used": "int64", "pos": "int64", "gen": "int64", "next": "int64", "temperature": "float32", "top_k": "int64",
    "top_p": "float32", "min_p": "float32", "penalty": "float32", "seed_key": "int64",
}


class DecodeBatch:
    """The running rows of an `InferenceEngine` and the body of one decoding step.

    ``stats`` is the engine's own dict (updated in place); ``decode`` turns token ids into text.
    """

    def __init__(
        self,
        model: Any,
        *,
        device: Any,
        seed: int,
        budget: Budget,
        max_prefill_tokens: int,
        logprobs_mode: str,
        eos_ids: set[int],
        decode: Callable[[list[int]], str],
        stats: dict[str, int],
        fast_decode: bool = True,
        packed_weights: bool | None = None,
        cuda_graphs: bool = True,
    ) -> None:
        import torch

        self.model = model
        self.device = device
        self.budget = budget
        self.max_prefill_tokens = max_prefill_tokens
        self.logprobs_mode = logprobs_mode
        self.eos_ids = eos_ids
        self.decode = decode
        self.stats = stats
        # Generators live on the model's device: torch.multinomial refuses a CPU generator for CUDA tensors.
        self.generator = torch.Generator(device=device).manual_seed(seed)
        self.active: list[Seq] = []
        self.kv = SlotKV(device)
        self.table = RowTable(device)
        cfg = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
        self.cache = self.kv.cache(int(cfg.num_hidden_layers))
        # Why decoding runs transformers' forward (None: the engine's own step, `FastDecoder`).
        self.slow_reason = why_not(model) if fast_decode else "fast_decode is off"
        self.fast = FastDecoder(model, packed=packed_weights) if self.slow_reason is None else None
        # Why decoding steps are not replayed from CUDA graphs (None: they are, `GraphedDecode`).
        self.graph_reason = graphs_why_not(self.fast, device) if cuda_graphs else "cuda_graphs is off"
        self.graphed = GraphedDecode(self.fast) if self.graph_reason is None and self.fast is not None else None
        self.kv.keep = self.graphed is not None
        self._comp_key: tuple[int, ...] = ()
        self._comp: dict[str, Any] = {}

    def weights_changed(self) -> None:
        """The model's weights may have changed: the fast path's packed copy is rebuilt before the next step."""
        if self.fast is not None:
            self.fast.weights_changed()

    # -- the step ----------------------------------------------------------------------------
    def step(self, new: list[Request], version: Callable[[], int]) -> None:
        """Prefill ``new`` beside the running rows, sample one token for every row, retire finished rows.

        ``version`` gives the weight version the new requests are stamped with, read once their
        first token is committed.
        """
        # Cancelled requests leave before we spend compute on them.
        if any(s.req.cancelled for s in self.active):
            self.remove_rows([i for i, s in enumerate(self.active) if s.req.cancelled])
        if not self.active and not new:  # every row was cancelled (clients went away): nothing to run
            return
        active = self.active
        plan = self.plan_prefill(new, len(active)) if new else None
        logits = self._forward(plan)
        seqs = active + (plan.seqs if plan is not None else [])
        tokens, host = self.choose(logits, seqs)
        self.commit(tokens, len(active), len(seqs))
        if plan is not None:
            stamp = version()
            for req in new:
                req.version = stamp
            self.active = seqs
        self.stats["steps"] += 1
        self.stats["max_batch"] = max(self.stats["max_batch"], len(seqs))
        self.stats["tokens"] += len(seqs)
        self.note_memory()
        with batched_wakeups():  # every stream that got a token is woken in one callback per event loop
            self._advance_rows(seqs, host)

    def _forward(self, plan: PrefillPlan | None) -> Any:
        """Logits of every row: the running rows' decode forward, then the new rows' prefill."""
        import torch

        active = self.active
        n_dec = len(active)
        n_new = len(plan.seqs) if plan is not None else 0
        dec_width = max((s.used for s in active), default=-1) + 1
        cols = max(dec_width, plan.width if plan is not None else 0)
        bound = max(self.active_width(), max((s.worst for s in plan.seqs), default=0) if plan else 0)
        self.kv.reserve(n_dec + n_new, cols, keep_rows=n_dec, keep_cols=max(dec_width - 1, 0),
                        max_tokens=self.budget.max_tokens, max_cols=bound)
        self.table.ensure(n_dec + n_new)
        parts = []
        if n_dec:
            parts.append(self.decode_forward(n_dec, dec_width))
        if plan is not None:
            self.stats["prefills"] += 1
            parts.append(self.prefill(plan, n_dec))
        return parts[0] if len(parts) == 1 else torch.cat(parts, dim=0)

    def _advance_rows(self, seqs: list[Seq], host: list[tuple[int, float | None, Any]]) -> None:
        """Host work per row; a request whose host work raises fails alone (the step is committed)."""
        finished = []
        broken: dict[int, tuple[Request, BaseException]] = {}
        for i, seq in enumerate(seqs):
            try:
                advance(seq, *host[i], eos_ids=self.eos_ids, decode=self.decode)
            except Exception as exc:  # committed state: fail this request, not the step
                broken.setdefault(id(seq.req), (seq.req, exc))
                continue
            if seq.finish_reason is not None:
                finished.append(i)
        finished = [i for i in finished if id(seqs[i].req) not in broken]
        if finished:
            self.retire(finished)
        for req, exc in broken.values():
            self.evict(req, step_error(exc))

    def active_width(self) -> int:
        """Worst-case dense width (padded prompt + max_tokens) of the running rows."""
        return max((s.worst for s in self.active), default=0)

    def newest_request(self) -> Request | None:
        """The running request admitted last: the one an out-of-memory error sheds."""
        return max((s.req for s in self.active), key=lambda r: r.order, default=None)

    def clear(self) -> None:
        """Forget every row and free the cache (the engine failed them all)."""
        self.active = []
        self.kv.release()
        self.table.drop("seen")

    def note_memory(self) -> None:
        """Record the cache's current, peak and capacity figures in ``stats``."""
        nbytes = self.kv.nbytes()
        self.stats["kv_bytes"] = nbytes
        self.stats["peak_kv_bytes"] = max(self.stats["peak_kv_bytes"], self.kv.peak_bytes, nbytes)
        self.stats["kv_capacity_tokens"] = self.kv.capacity_tokens()

    # -- prefill -----------------------------------------------------------------------------
    def plan_prefill(self, new: list[Request], first_slot: int) -> PrefillPlan:
        """Give every new row a slot: each distinct prompt's first row is prefilled, the rest are copies.

        Identical prompts (the G samples of a GRPO group sent as G requests, or ``n > 1``) share one
        prefill; their cache rows are copied from it afterwards.
        """
        from verifiers.inference.engine.kv_budget import prefill_groups

        unique: dict[tuple[int, ...], int] = {}
        longest_new: list[int] = []
        for r in new:
            u = unique.setdefault(tuple(r.prompt_ids), len(unique))
            if u == len(longest_new):
                longest_new.append(r.max_tokens)
            longest_new[u] = max(longest_new[u], r.max_tokens)
        prompts = list(unique)
        bound = max(self.active_width(), max(r.worst for r in new))
        groups = prefill_groups([(len(p), longest_new[i]) for i, p in enumerate(prompts)], bound,
                                max(1, self.max_prefill_tokens))
        slot_of: dict[int, int] = {}
        group_slots: list[tuple[int, list[int], int]] = []  # (first slot, prompt ids, padded length)
        slot = first_slot
        for g in groups:
            group_slots.append((slot, g, max(len(prompts[i]) for i in g)))
            for i in g:
                slot_of[i] = slot
                slot += 1
        padded = {i: length for _, g, length in group_slots for i in g}
        seqs: list[Seq | None] = [None] * len(unique)
        copies: list[tuple[int, int]] = []
        for req in new:
            req.seqs = []
            req.remaining = req.n
            u = unique[tuple(req.prompt_ids)]
            for j in range(req.n):
                p = req.params
                row = RowSampling(p.temperature, p.top_p, p.top_k, p.min_p, p.repetition_penalty, p.seed, j)
                seq = Seq(req, j, row, list(req.forced), used=padded[u], worst=padded[u] + req.max_tokens)
                req.seqs.append(seq)
                if seqs[slot_of[u] - first_slot] is None:
                    seqs[slot_of[u] - first_slot] = seq
                else:
                    copies.append((slot_of[u], slot))
                    seqs.append(seq)
                    slot += 1
        return PrefillPlan([s for s in seqs if s is not None], prompts, group_slots, copies,
                            max(padded.values()))

    def prefill(self, plan: PrefillPlan, first_slot: int) -> Any:
        """Prefill the distinct prompts group by group, in chunks of at most ``max_prefill_tokens`` tokens.

        Each group is left-padded to its longest prompt and written straight into its slots of the
        cache; a forward sees ``rows x chunk <= max_prefill_tokens`` new tokens (a single long prompt
        is cut along the sequence), so activation memory stays bounded whatever arrives.
        """
        import torch

        kv, dev = self.kv, self.device
        n_new = len(plan.seqs)
        kv.attn[first_slot : first_slot + n_new].zero_()
        group_logits = []
        for start, members, length in plan.groups:
            rows = [plan.prompts[i] for i in members]
            ids = torch.tensor([[0] * (length - len(p)) + list(p) for p in rows], dtype=torch.long, device=dev)
            mask = torch.tensor([[0] * (length - len(p)) + [1] * len(p) for p in rows], dtype=torch.long, device=dev)
            pos = (mask.cumsum(1) - 1).clamp(min=0)
            stop = start + len(rows)
            chunk = max(1, self.max_prefill_tokens // len(rows))
            for off in range(0, length, chunk):
                n = min(chunk, length - off)
                kv.attn[start:stop, off : off + n] = mask[:, off : off + n]
                kv.plan_prefill(start, stop, off, n)
                last = self._prefill_forward(ids[:, off : off + n], pos[:, off : off + n], kv.attn[start:stop, : off + n])
                self.stats["prefill_forwards"] += 1
            group_logits.append(last)
        logits = group_logits[0] if len(group_logits) == 1 else torch.cat(group_logits, dim=0)
        if plan.copies:
            src = torch.tensor([s for s, _ in plan.copies], dtype=torch.long, device=dev)
            dst = torch.tensor([d for _, d in plan.copies], dtype=torch.long, device=dev)
            kv.copy_rows(src, dst, plan.width)
            logits = torch.cat([logits, logits.index_select(0, src - first_slot)], dim=0)
        self.join_rows(plan.seqs, first_slot, logits.shape[1])
        return logits

    def _prefill_forward(self, ids: Any, pos: Any, attn: Any) -> Any:
        """The last column's logits of one prefill chunk, its keys and values written into the planned slots."""
        if self.fast is not None:
            return self.fast.prefill(ids, pos, attn, self.kv)
        out = self.model(input_ids=ids, attention_mask=attn, position_ids=pos, past_key_values=self.cache,
                         use_cache=True, logits_to_keep=1)
        return out.logits[:, -1, :]

    def join_rows(self, seqs: list[Seq], first_slot: int, vocab: int) -> None:
        """Write the new rows' positions and sampling parameters into their slots (once per row)."""
        import torch

        from verifiers.inference.engine.sampling import row_values, seed_key

        t = self.table
        for name, dtype in _ROW_COLUMNS.items():
            t.add(name, getattr(torch, dtype))
        t.set("used", first_slot, [s.used for s in seqs])
        t.set("pos", first_slot, [len(s.req.prompt_ids) for s in seqs])
        t.set("gen", first_slot, [0] * len(seqs))
        vals = [row_values(s.row, vocab) for s in seqs]
        for name in ("temperature", "top_k", "top_p", "min_p", "penalty"):
            t.set(name, first_slot, [v[name] for v in vals])
        t.set("seed_key", first_slot, [seed_key(s.row) for s in seqs])
        penalised = [i for i, s in enumerate(seqs) if s.row.repetition_penalty != 1.0]
        if penalised or "seen" in t.t:
            seen = t.add("seen", torch.bool, vocab)
            seen[first_slot : first_slot + len(seqs)] = False
            rows = [first_slot + i for i in penalised for _ in seqs[i].req.prompt_ids]
            ids = [tok for i in penalised for tok in seqs[i].req.prompt_ids]
            if rows:
                seen[torch.tensor(rows, device=self.device), torch.tensor(ids, device=self.device)] = True

    # -- decoding ------------------------------------------------------------------------------
    def decode_forward(self, rows: int, width: int) -> Any:
        """One token for each running row, its key/value written in place at the row's next column."""
        cols = self.table.t["used"][:rows]
        attn = self.kv.attn
        attn[:rows].scatter_(1, cols.unsqueeze(1), 1)
        self.kv.plan_decode(rows, cols, width)
        if self.graphed is not None:
            logits = self.graphed.step(self.table.t["next"], self.table.t["pos"], cols, rows, self.kv)
            if logits is not None:
                return logits
            self.kv.plan_decode(rows, cols, width)  # a failed capture may have left its own plan
        if self.fast is not None:
            return self.fast(self.table.t["next"][:rows], self.table.t["pos"][:rows], attn[:rows, :width], self.kv)
        out = self.model(input_ids=self.table.t["next"][:rows].unsqueeze(1), attention_mask=attn[:rows, :width],
                         position_ids=self.table.t["pos"][:rows].unsqueeze(1), past_key_values=self.cache,
                         use_cache=True)
        return out.logits[:, -1, :]

    def commit(self, tokens: Any, n_dec: int, n: int) -> None:
        """Record the sampled tokens on the device (next inputs, positions, repetition-penalty mask)."""
        t = self.table.t
        t["next"][:n] = tokens
        if n_dec:
            t["used"][:n_dec] += 1
            t["pos"][:n_dec] += 1
            for s in self.active[:n_dec]:
                s.used += 1
        t["gen"][:n] += 1
        if "seen" in t:
            t["seen"][:n].scatter_(1, tokens.unsqueeze(1), True)

    def batch_params(self, seqs: list[Seq], vocab: int) -> Any:
        """Slices of the per-row columns plus the batch's composition (rebuilt only when rows change)."""
        from verifiers.inference.engine.sampling import BatchParams, composition

        n = len(seqs)
        key = tuple(s.uid for s in seqs)
        if key != self._comp_key:
            self._comp = composition([s.row for s in seqs], vocab, self.device)
            self._comp_key = key
        t = self.table.t
        comp = dict(self._comp)
        seeded = comp["seeded_idx"]
        keys = t["seed_key"][:n].index_select(0, seeded) if seeded is not None else None
        return BatchParams(
            temperature=t["temperature"][:n], top_k=t["top_k"][:n], top_p=t["top_p"][:n], min_p=t["min_p"][:n],
            penalty=t["penalty"][:n], seen=t["seen"][:n] if "seen" in t else None, seed_keys=keys, **comp,
        )

    def choose(self, logits: Any, seqs: list[Seq]) -> tuple[Any, list[tuple[int, float | None, Any]]]:
        """Sample one token per row; returns the device tokens and, per row, (token, logprob, top logprobs).

        Everything the host needs comes back in one device-to-host copy.
        """
        import torch

        from verifiers.inference.engine.sampling import process_logits, sample

        dev, n = self.device, len(seqs)
        logits = logits.float()
        # min_tokens: the end-of-sequence tokens are impossible until enough tokens exist.
        block = [i for i, s in enumerate(seqs) if len(s.out) < s.req.params.min_tokens]
        if block:
            stop_ids = sorted(self.eos_ids)
            pairs = [(i, t) for i in block for t in stop_ids + list(seqs[i].req.params.stop_token_ids)]
            logits[torch.tensor([i for i, _ in pairs], device=dev),
                   torch.tensor([t for _, t in pairs], device=dev)] = float("-inf")
        params = self.batch_params(seqs, logits.shape[1])
        processed = process_logits(logits, params)
        tokens = sample(processed, params, self.generator, self.table.t["gen"][:n])
        forced = [(i, s.forced[len(s.out)]) for i, s in enumerate(seqs) if len(s.forced) > len(s.out)]
        if forced:
            tokens[torch.tensor([i for i, _ in forced], device=dev)] = torch.tensor(
                [t for _, t in forced], dtype=tokens.dtype, device=dev)
        parts = [tokens.to(torch.float64).unsqueeze(1)]
        k = 0
        if any(s.req.params.logprobs for s in seqs):
            source = logits if self.logprobs_mode == "raw" else processed
            lps = torch.log_softmax(source, dim=1)
            parts.append(lps.gather(1, tokens.unsqueeze(1)).to(torch.float64))
            k = max(s.req.params.top_logprobs for s in seqs)
            if k > 0:
                vals, idx = torch.topk(lps, k, dim=1)
                parts += [idx.to(torch.float64), vals.to(torch.float64)]
        packed = torch.cat(parts, dim=1).cpu().tolist()  # the step's one device-to-host copy
        host = []
        for row in packed:
            top = list(zip((int(x) for x in row[2 : 2 + k]), row[2 + k :], strict=True)) if k else None
            host.append((int(row[0]), row[1] if len(parts) > 1 else None, top))
        return tokens, host

    def retire(self, rows: list[int]) -> None:
        """Finished rows leave; a request resolves when its last row finishes."""
        for i in rows:
            seq = self.active[i]
            req = seq.req
            req.remaining -= 1
            if req.remaining == 0 and not req.cancelled:
                req.sink.resolve(output(req, self.decode))
        self.remove_rows(rows)

    def remove_rows(self, rows: list[int]) -> None:
        """Drop rows, keeping the rest packed in slots ``[0, B)`` by moving the last rows into the holes.

        Only the moved rows are copied (never the whole cache); an empty batch frees the cache.
        """
        import torch

        gone = set(rows)
        n = len(self.active)
        keep = n - len(gone)
        holes = sorted(i for i in gone if i < keep)
        movers = [i for i in range(keep, n) if i not in gone]
        if movers:
            src = torch.tensor(movers, dtype=torch.long, device=self.device)
            dst = torch.tensor(holes, dtype=torch.long, device=self.device)
            self.kv.copy_rows(src, dst, max(self.active[i].used for i in movers))
            self.table.copy_rows(src, dst)
            for h, m in zip(holes, movers, strict=True):
                self.active[h] = self.active[m]
        self.active = self.active[:keep]
        if not self.active:
            if not self.kv.keep:
                self.kv.release()
            self.table.drop("seen")
            self.note_memory()

    def evict(self, req: Request, exc: BaseException) -> None:
        """Fail ``req`` and free its rows; the other rows go on."""
        self.stats["request_failures"] += 1
        req.cancelled = True
        req.sink.fail(exc)
        rows = [i for i, s in enumerate(self.active) if s.req is req]
        if rows:
            self.remove_rows(rows)
