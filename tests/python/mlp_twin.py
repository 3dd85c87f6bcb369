"""A PyTorch twin of the built-in byte-level MLP: its own code, the same architecture (embed the
previous `context` bytes, tanh hidden layers, a linear output), with the weights stored as
(in, out) like the runtime's so that the flat layouts agree, and started from the runtime's
initial parameters."""

import torch
import torch.nn.functional as F

import diloco


class MlpTwin(torch.nn.Module):
    def __init__(self, vocab, context, embed_dim, hidden, layers):
        super().__init__()
        self.embedding = torch.nn.Parameter(torch.zeros(vocab, embed_dim))
        dims = [context * embed_dim] + [hidden] * layers
        for l in range(1, layers + 1):
            setattr(self, f"h{l}", _Dense(dims[l - 1], dims[l]))
        self.out = _Dense(hidden, vocab)
        self.layers = layers

    def forward(self, x):
        h = F.embedding(x, self.embedding).reshape(x.shape[0], -1)
        for l in range(1, self.layers + 1):
            h = torch.tanh(getattr(self, f"h{l}")(h))
        return self.out(h)


class _Dense(torch.nn.Module):
    def __init__(self, n_in, n_out):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(n_in, n_out))
        self.bias = torch.nn.Parameter(torch.zeros(n_out))

    def forward(self, x):
        return torch.addmm(self.bias, x, self.weight)


def model_shape(model):
    """(vocab, context, embed_dim, hidden, hidden_layers) from the run's model section."""
    return (model["vocab"], model["context"], model["embed_dim"], model["hidden"],
            model["hidden_layers"])


def load_initial(model, initial):
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(torch.from_numpy(initial[name]).reshape(p.shape))


def make_learner(ctx):
    """The twin as a learner factory: `--learner mlp_twin:make_learner`."""
    model = MlpTwin(*model_shape(ctx.model))
    load_initial(model, diloco.builtin_initial_params(ctx))
    inner = ctx.inner
    opt = torch.optim.AdamW(model.parameters(), lr=inner["lr"],
                            betas=(inner["beta1"], inner["beta2"]), eps=inner["eps"],
                            weight_decay=inner["weight_decay"])

    def loss(x, y):
        return F.cross_entropy(model(x), y)

    # Its loss keeps no state between calls: steps may be computed ahead on a run's threads.
    return diloco.Learner(model, opt, loss=loss, embeddings=["embedding"], ahead=True)


def make_dropout_learner(ctx):
    """The twin with dropout on its logits: every step draws from the learner's generator, so
    a run is the same only if no other code swaps the generator under a step."""
    learner = make_learner(ctx)
    model, drop = learner.module, torch.nn.Dropout(0.2)
    learner.loss = lambda x, y: F.cross_entropy(drop(model(x)), y)
    return learner


def make_compiled_learner(ctx, bf16=False, fused=False):
    """The twin with what PyTorch 2.x users put inside a step: the module run through
    `torch.compile`, optionally under bf16 autocast on the CPU (the parameters stay float32 in
    the runtime's buffers) and with AdamW's fused kernel."""
    learner = make_learner(ctx)
    model = learner.module
    if fused:
        inner = ctx.inner
        learner.optimizer = torch.optim.AdamW(
            model.parameters(), lr=inner["lr"], betas=(inner["beta1"], inner["beta2"]),
            eps=inner["eps"], weight_decay=inner["weight_decay"], fused=True)
    compiled = torch.compile(model)

    def loss(x, y):
        if not bf16:
            return F.cross_entropy(compiled(x), y)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = compiled(x)
        return F.cross_entropy(logits.float(), y)

    learner.loss = loss
    return learner
