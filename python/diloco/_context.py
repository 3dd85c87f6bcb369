"""What a learner factory is given: who the learner is, and the runtime's data for it."""

import torch


class Data:
    """One learner's part of the run's training data, and the evaluation set.

    next_batch() -> (inputs, targets): inputs a (batch, context) int64 tensor of byte tokens,
    targets the (batch,) int64 tensor of the byte that follows each context. Each learner reads
    its own deterministic part of the data; its position is kept in snapshots.
    """

    def __init__(self, cursor):
        self._cursor = cursor  # _diloco.DataCursor

    @property
    def batch(self):
        return self._cursor.batch

    @property
    def context(self):
        return self._cursor.context

    @property
    def vocab(self):
        return 256

    @property
    def tokens(self):
        """Targets read so far."""
        return self._cursor.tokens

    def next_batch(self):
        x, y = self._cursor.next_batch()
        return torch.from_numpy(x).long(), torch.from_numpy(y).long()

    def eval_batches(self, batch=256):
        """The run's fixed evaluation set, in batches of `batch`: [(inputs, targets)]."""
        x, y = self._cursor.eval_set()
        x, y = torch.from_numpy(x).long(), torch.from_numpy(y).long()
        return [(x[i:i + batch], y[i:i + batch]) for i in range(0, len(y), batch)]


class LearnerContext:
    """index: the learner's slot; learners: slots in the run; seed: the run seed;
    incarnation: 0 for the first process on the slot, one more per restart; data: the runtime's
    Data for this learner; inner: the run's inner optimizer settings (lr, beta1, beta2, eps,
    weight_decay, clip_norm, warmup_steps, total_steps, min_lr_ratio); model: the cluster file's
    model section (vocab, context, embed_dim, hidden, hidden_layers), for factories that size
    their model from it; batch, context: the run's batch size and context length; config: the
    whole run configuration as YAML text.

    An island (a learner that is several processes, started with torchrun): rank and
    world_size, this process's place in the island (0 and 1 for a learner of one process);
    local_rank, its place on its host; device, where its module belongs (cuda:LOCAL_RANK where
    there are GPUs, else the CPU). Every rank's factory is called, on every rank the same way,
    and may wrap the module in DistributedDataParallel."""

    rank = 0
    world_size = 1
    local_rank = 0
    device = torch.device("cpu")

    def __init__(self, index, learners, seed, incarnation, data, inner, model, batch, context,
                 config):
        self.index = index
        self.learners = learners
        self.seed = seed
        self.incarnation = incarnation
        self.data = data
        self.inner = inner
        self.model = model
        self.batch = batch
        self.context = context
        self.config = config

    def __repr__(self):
        island = (f", rank={self.rank}, world_size={self.world_size}"
                  if self.world_size > 1 else "")
        return (f"LearnerContext(index={self.index}, learners={self.learners}, "
                f"seed={self.seed}, incarnation={self.incarnation}{island})")
