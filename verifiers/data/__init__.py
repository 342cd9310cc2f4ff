"""Training data in: files to rows, rows to prompts, prompts to padded token batches.

The pieces follow the behaviours of verl's ``RLHFDataset`` (ANCHORS.md §4), each in
its own module:

- `load_rows` / `to_environment_dataset` (loading): parquet, jsonl/json, ``save_to_disk``
  folders, HF datasets or lists of dicts; user or verl column names mapped to
  ``prompt``/``question``, ``answer``, ``task``, ``info``.
- `apply_chat_template` (templating): the one place a chat template is applied.
- `filter_overlong` (filtering): drop rows whose templated prompt is too long, over
  several processes; rows whose template fails count as overlong.
- `truncate` (truncation): ``left``, ``right``, ``middle`` or ``error``.
- `left_pad`, `right_pad`, `pad_2d`, `position_ids_from_mask` (padding; need torch).
- `DataOrder` (order): seeded, resumable, epoch-wise index order.
- `DataBatch` (batch): tensors and per-row objects reordered together.

Nothing here imports torch or transformers at import time.

`DataOrder`, `DataBatch` and `pad_2d` are library pieces for users' own loops (docs/data.md);
vf-train does not use them: its prompt order is `trainers.grpo.data.sampler.RepeatSampler`, its batch
`trainers.grpo.data.batch.TrainBatch`. They stay apart on purpose: the two orders differ, so switching
the trainer over would change its sample order and its checkpoints.
"""

from verifiers.data.batch import DataBatch
from verifiers.data.filtering import FilterStats, filter_overlong
from verifiers.data.loading import load_rows, to_environment_dataset
from verifiers.data.order import DataOrder, epoch_permutation
from verifiers.data.padding import left_pad, pad_2d, position_ids_from_mask, right_pad
from verifiers.data.templating import ChatTemplateError, apply_chat_template, encode_prompt
from verifiers.data.truncation import TRUNCATION_MODES, TruncationMode, truncate

__all__ = [
    "TRUNCATION_MODES",
    "ChatTemplateError",
    "DataBatch",
    "DataOrder",
    "FilterStats",
    "TruncationMode",
    "apply_chat_template",
    "encode_prompt",
    "epoch_permutation",
    "filter_overlong",
    "left_pad",
    "load_rows",
    "pad_2d",
    "position_ids_from_mask",
    "right_pad",
    "to_environment_dataset",
    "truncate",
]
