"""Adam with a cosine schedule, step for step what ``torch.optim.Adam(foreach=True)`` + ``LambdaLR`` compute.

Constructing any ``torch.optim`` optimizer imports ``torch._dynamo`` (its methods are wrapped by
``torch._disable_dynamo``, which imports the compiler on first call): about 2.5 CPU seconds and 900 modules
(sympy among them) a fit never uses. This class runs the same update with the same ``torch._foreach_*`` kernels
and the same Python scalars as torch's non-capturable multi-tensor Adam (torch/optim/adam.py,
``_multi_tensor_adam``; defaults betas (0.9, 0.999), eps 1e-8, no weight decay, no amsgrad), and takes the
learning rate of step t as ``lr * schedule(t)`` exactly as ``LambdaLR`` sets it. Results are bit-identical
(``tests/test_fit.py`` compares both on a fixed seed).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch


class ScheduledAdam:
    """``torch.optim.Adam(params, lr, foreach=True)`` driven by ``LambdaLR(opt, schedule)``: call ``zero_grad``,
    backward, then ``step`` (the optimizer's step and the scheduler's in one)."""

    def __init__(
        self,
        params: Iterable[torch.Tensor],
        lr: float,
        schedule: Callable[[int], float],
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
    ) -> None:
        self.params = list(params)
        if not self.params:
            raise ValueError("optimizer got an empty parameter list")
        self.base_lr = lr
        self.schedule = schedule
        self.beta1, self.beta2 = betas
        self.eps = eps
        self.epoch = 0
        self.lr = lr * schedule(0)  # LambdaLR's first step, at construction
        # Lazy state per parameter, as torch creates it on a parameter's first gradient: a CPU step counter in the
        # default scalar dtype and zero moment buffers.
        self.state: dict[int, tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    def _state(self, p: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        state = self.state.get(id(p))
        if state is None:
            dtype = torch.float64 if torch.get_default_dtype() == torch.float64 else torch.float32
            state = (torch.tensor(0.0, dtype=dtype, device="cpu"),
                     torch.zeros_like(p, memory_format=torch.preserve_format),
                     torch.zeros_like(p, memory_format=torch.preserve_format))
            self.state[id(p)] = state
        return state

    @torch.no_grad()
    def step(self) -> None:
        with_grad = [p for p in self.params if p.grad is not None]
        if with_grad:
            self._update(with_grad)
        self.epoch += 1
        self.lr = self.base_lr * self.schedule(self.epoch)

    def _update(self, params: list[torch.Tensor]) -> None:
        grads = [p.grad for p in params if p.grad is not None]
        if len(grads) != len(params) or any(g.is_sparse or torch.is_complex(p) or p.device.type != "cpu"
                                            for p, g in zip(params, grads)):
            raise ValueError("ScheduledAdam handles dense real CPU parameters with gradients only")
        states = [self._state(p) for p in params]
        steps = [s[0] for s in states]
        exp_avgs = [s[1] for s in states]
        exp_avg_sqs = [s[2] for s in states]
        beta1, beta2, lr = self.beta1, self.beta2, self.lr
        torch._foreach_add_(steps, torch.tensor(1.0, device="cpu"), alpha=1.0)
        torch._foreach_lerp_(exp_avgs, grads, 1 - beta1)
        torch._foreach_mul_(exp_avg_sqs, beta2)
        torch._foreach_addcmul_(exp_avg_sqs, grads, grads, 1 - beta2)
        bias_correction1 = [1 - beta1 ** step.item() for step in steps]
        bias_correction2 = [1 - beta2 ** step.item() for step in steps]
        step_size = [(lr / bc) * -1 for bc in bias_correction1]
        bias_correction2_sqrt = [bc**0.5 for bc in bias_correction2]
        exp_avg_sq_sqrt = torch._foreach_sqrt(exp_avg_sqs)
        torch._foreach_div_(exp_avg_sq_sqrt, bias_correction2_sqrt)
        torch._foreach_add_(exp_avg_sq_sqrt, self.eps)
        torch._foreach_addcdiv_(params, exp_avgs, exp_avg_sq_sqrt, step_size)
