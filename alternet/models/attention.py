"""Attention kinds for MSA blocks, all mapping a (B, C_in, H, W) map to (B, C_out, H, W).

* ``window``: softmax attention in non-overlapping p x p windows with a learned relative position
  bias (shared by all heads, as in the reference, or one table per head).
* ``global``: the same attention with a single window covering the whole feature map.
* ``position_only``: ``window`` without its content term: each head's kernel is softmax(B_h), its own relative
  position bias alone, the same for every image (data-independent, like a convolution's); the values' and output
  projections as ``window``'s, no query or key projection. The control for whether an MSA's benefit comes from
  its data specificity, beside ``window`` with one bias table per head (``bias_per_head``, which it requires).
* ``focused_linear``: focused linear attention (FLatten Transformer, Han et al., ICCV 2023) over the
  whole map, with linear cost in the number of tokens.

Softmax kinds run through ``F.scaled_dot_product_attention`` (fused kernels where available) or an explicit math
path, which supports double backward (Hessian-vector products). ``fused=True``/``False`` picks one. Left unset
(``None``), attention is fused except on a CPU in bf16/fp16 with windows of up to 256 tokens, where the math path
is 1.2-1.5x faster for the attention's forward + backward and 5-9% for an AlterNet-50 training step
(``bench/attention.py``). timm's global switch (``timm.layers.set_fused_attn``, env ``TIMM_FUSED_ATTN``) turning
fused attention off still turns it off, as it does for timm's own attention layers.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from timm.layers import use_fused_attn
from torch import nn

from ..architectures.rules import check_attention


def window_partition(x: torch.Tensor, window: tuple[int, int]) -> torch.Tensor:
    """(B, C, H, W) -> (B * num_windows, ph * pw, C)."""
    b, c, h, w = x.shape
    ph, pw = window
    x = x.reshape(b, c, h // ph, ph, w // pw, pw).permute(0, 2, 4, 3, 5, 1)
    return x.reshape(-1, ph * pw, c)


def window_maps(x: torch.Tensor, window: tuple[int, int]) -> torch.Tensor:
    """(B, C, H, W) -> (B * num_windows, C, ph, pw): each window as a small map, for convolutions; one copy, into
    the input's memory format (channels_last stays channels_last)."""
    b, c, h, w = x.shape
    ph, pw = window
    if x.is_contiguous(memory_format=torch.channels_last):
        nhwc = x.permute(0, 2, 3, 1).reshape(b, h // ph, ph, w // pw, pw, c).permute(0, 1, 3, 2, 4, 5)
        return nhwc.reshape(-1, ph, pw, c).permute(0, 3, 1, 2)
    x = x.reshape(b, c, h // ph, ph, w // pw, pw).permute(0, 2, 4, 1, 3, 5)
    return x.reshape(-1, c, ph, pw)


def merge_window_maps(x: torch.Tensor, size: tuple[int, int] | torch.Size) -> torch.Tensor:
    """(B * num_windows, C, ph, pw) -> (B, C, H, W), in the windows' memory format."""
    _, c, ph, pw = x.shape
    h, w = size
    if x.is_contiguous(memory_format=torch.channels_last):
        nhwc = x.permute(0, 2, 3, 1).reshape(-1, h // ph, w // pw, ph, pw, c).permute(0, 1, 3, 2, 4, 5)
        return nhwc.reshape(-1, h, w, c).permute(0, 3, 1, 2)
    x = x.reshape(-1, h // ph, w // pw, c, ph, pw).permute(0, 3, 1, 4, 2, 5)
    return x.reshape(-1, c, h, w)


def relative_position_index(window: tuple[int, int]) -> torch.Tensor:
    """Index of (pos_j - pos_i) into a flattened (2ph-1) x (2pw-1) table, shape (ph*pw, ph*pw)."""
    ph, pw = window
    coords = torch.stack(torch.meshgrid(torch.arange(ph), torch.arange(pw), indexing="ij")).flatten(1)
    delta = coords[:, None, :] - coords[:, :, None]  # delta[:, i, j] = pos_j - pos_i
    return (delta[0] + ph - 1) * (2 * pw - 1) + (delta[1] + pw - 1)


# whether the q/k/v projections have a bias when the model does not say (qkv_bias=None): none in the reference's
# softmax attention (HDVW), a bias in FLatten-Swin's focused linear attention
QKV_BIAS_DEFAULT = {"window": False, "global": False, "focused_linear": True, "position_only": False}


class _Projections(nn.Module):
    """q and kv projections (bias-free unless ``qkv_bias``) and a biased output projection, shared by all kinds."""

    def __init__(self, dim_in: int, dim_out: int, heads: int, head_dim: int, qkv_bias: bool = False):
        super().__init__()
        self.heads = heads
        self.head_dim = head_dim
        inner = heads * head_dim
        self.to_q = nn.Linear(dim_in, inner, bias=qkv_bias)
        self.to_kv = nn.Linear(dim_in, 2 * inner, bias=qkv_bias)
        self.to_out = nn.Linear(inner, dim_out)

    def qkv(self, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(B, N, C) tokens -> q, k, v each (B, heads, N, head_dim)."""
        b, n, _ = tokens.shape
        q = self.to_q(tokens)
        k, v = self.to_kv(tokens).chunk(2, dim=-1)
        return tuple(t.reshape(b, n, self.heads, self.head_dim).transpose(1, 2) for t in (q, k, v))

    def merge_heads(self, x: torch.Tensor) -> torch.Tensor:
        """(B, heads, N, head_dim) -> (B, N, dim_out)."""
        b, h, n, d = x.shape
        return self.to_out(x.transpose(1, 2).reshape(b, n, h * d))


class _Windowed:
    """What window attention and position-only attention share: the windows, the relative position bias table
    (``rel_pos_bias``, one or ``heads`` of them) and its index, and the heads' views of window maps.

    A feature map smaller than the window along a side is one window along that side (Swin's clipping, done per
    call): the clipped window's offsets are a centred part of the table, so a model built for 32 px also runs at
    24 or 16 px (``recipe.progressive_resize``) with the same parameters."""

    heads: int
    head_dim: int
    window: tuple[int, int]
    rel_pos_bias: nn.Parameter
    rel_pos_index: torch.Tensor

    def _position_table(self, bias_per_head: bool) -> None:
        table = (self.heads,) if bias_per_head else ()
        table += (2 * self.window[0] - 1, 2 * self.window[1] - 1)
        self.rel_pos_bias = nn.Parameter(torch.randn(table) * 0.02)
        self.register_buffer("rel_pos_index", relative_position_index(self.window), persistent=False)

    def position_bias(self, window: tuple[int, int] | None = None) -> torch.Tensor:
        """(1 or heads, N, N) bias added to the attention logits of every window (``window``: a clipped one)."""
        table = self.rel_pos_bias.flatten(-2)
        index = self.rel_pos_index
        if window is not None and window != self.window:  # a clipped window: the full window's top-left ph x pw
            ph, pw = window  # positions, whose offsets the full index already holds (a view: nothing computed)
            index = index.view(*self.window, *self.window)[:ph, :pw, :ph, :pw].reshape(ph * pw, ph * pw)
        bias = table[..., index]
        return bias if bias.dim() == 3 else bias.unsqueeze(0)

    def window_for(self, size: tuple[int, int] | torch.Size) -> tuple[int, int]:
        """The window a feature map of ``size`` is cut into: the model's, clipped to the map's sides."""
        h, w = size
        ph, pw = min(self.window[0], h), min(self.window[1], w)
        if h % ph or w % pw:
            raise ValueError(
                f"{type(self).__name__}: feature map {h}x{w} is not divisible by the attention window {ph}x{pw}; "
                "use an input size whose stage maps are multiples of the window, or change model.window"
            )
        return ph, pw

    def _windows(self, x: torch.Tensor) -> tuple[torch.Tensor, tuple[int, int]]:
        window = self.window_for(x.shape[-2:])
        return window_partition(x, window), window

    def _heads(self, maps: torch.Tensor, b: int, n: int, parts: int) -> tuple[torch.Tensor, ...]:
        """(B', parts * heads * head_dim, ph, pw) maps -> ``parts`` tensors (B', heads, N, head_dim), as views
        where the memory order allows (channels_last: the tokens' own order)."""
        if maps.is_contiguous(memory_format=torch.channels_last):
            tokens = maps.permute(0, 2, 3, 1).reshape(b, n, parts, self.heads, self.head_dim)
            return tokens.permute(2, 0, 3, 1, 4).unbind(0)
        return maps.reshape(b, parts, self.heads, self.head_dim, n).transpose(-2, -1).unbind(1)

    def _merged(self, out: torch.Tensor, maps: torch.Tensor, to_out: nn.Linear, size: torch.Size) -> torch.Tensor:
        """(B', heads, N, head_dim) attended values -> the output projection -> (B, C_out, H, W), in the window
        maps' memory format."""
        b, window = maps.shape[0], maps.shape[-2:]
        if maps.is_contiguous(memory_format=torch.channels_last):  # tokens (N, inner) are the NHWC memory order
            out = out.transpose(1, 2).reshape(b, *window, -1).permute(0, 3, 1, 2)
        else:
            out = out.transpose(-2, -1).reshape(b, -1, *window)
        out = F.conv2d(out, to_out.weight[..., None, None], to_out.bias)
        return merge_window_maps(out, size)


def fused_setting(fused: bool | None) -> bool | None:
    """A softmax attention's ``fused`` as given (None: per call, :meth:`WindowAttention._fuses`), but off while
    timm's global switch is off."""
    return fused if fused is not None or use_fused_attn() else False


class WindowAttention(_Windowed, _Projections):
    """Softmax attention in non-overlapping windows with a learned relative position bias."""

    def __init__(
        self,
        dim_in: int,
        dim_out: int,
        *,
        heads: int,
        head_dim: int = 64,
        window: tuple[int, int] = (4, 4),
        bias_per_head: bool = False,
        fused: bool | None = None,
        qkv_bias: bool = False,
    ):
        super().__init__(dim_in, dim_out, heads, head_dim, qkv_bias)
        self.window = tuple(window)
        self.scale = head_dim**-0.5
        self.fused = fused_setting(fused)
        self._position_table(bias_per_head)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Windows are cut once, as small maps, and the projections run on them as 1x1 convolutions (the conv
        layout, where oneDNN and cuDNN are fastest); the weights are the Linear modules', so the function and the
        checkpoints are those of token-wise linear projections."""
        size = x.shape[-2:]
        window = self.window_for(size)
        maps = window_maps(x, window)  # (B * windows, C, ph, pw), in the input's memory format
        b, n = maps.shape[0], window[0] * window[1]
        q = self._heads(F.conv2d(maps, self.to_q.weight[..., None, None], self.to_q.bias), b, n, 1)[0]
        k, v = self._heads(F.conv2d(maps, self.to_kv.weight[..., None, None], self.to_kv.bias), b, n, 2)
        position = self.position_bias(window)
        if self._fuses(q):
            if q.stride(-1) != 1:  # the contiguous layout's head views: CUDA's fused kernels need unit stride and
                q, k, v = q.contiguous(), k.contiguous(), v.contiguous()  # would silently fall back to math
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=position.to(q.dtype), scale=self.scale)
        else:
            out = self._softmax(q, k, position).to(v.dtype) @ v
        return self._merged(out, maps, self.to_out, size)

    def _fuses(self, q: torch.Tensor) -> bool:
        """The fused kernel, unless left to choose on a CPU in reduced precision for windows of up to 256 tokens:
        there torch's kernel (the position bias as a float mask) measured 1.2-1.5x slower than the math path from
        16 to 196 tokens, and faster at 784 (a 28 x 28 global map), where the fp32 N x N logits grow large."""
        if self.fused is not None:
            return self.fused
        return not (q.device.type == "cpu" and q.dtype in (torch.bfloat16, torch.float16) and q.shape[-2] <= 256)

    def _softmax(self, q: torch.Tensor, k: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        """Softmax of the logits plus the fp32 position bias, so in fp32 under bf16 autocast (as the reference's):
        more accurate, and faster on a CPU than a bf16 softmax."""
        return ((q @ k.transpose(-2, -1)) * self.scale + bias).softmax(dim=-1)

    @torch.no_grad()
    def attention_map(self, x: torch.Tensor) -> torch.Tensor:
        """Attention probabilities, (B * num_windows, heads, N, N), rows summing to 1."""
        tokens, window = self._windows(x)
        q, k, _ = self.qkv(tokens)
        return self._softmax(q, k, self.position_bias(window))


class PositionOnlyAttention(_Windowed, nn.Module):
    """Window attention without its content term: each head mixes the values of a window with its own kernel
    softmax(B_h), B_h that head's learned relative position bias, so every image (and window) gets the same
    per-head kernels, as a convolution does; only the values depend on the input.

    Its parameters are the values' projection ``to_v``, one bias table per head and the output projection: no
    query or key projection, so nothing it holds is dead (no frozen or always-zero-gradient weights). Its
    counterpart in a comparison is window attention with one table per head too (``model.bias_per_head=true`` in
    both arms; :func:`check_attention` refuses a shared table here).
    """

    def __init__(
        self,
        dim_in: int,
        dim_out: int,
        *,
        heads: int,
        head_dim: int = 64,
        window: tuple[int, int] = (4, 4),
        qkv_bias: bool = False,
    ):
        super().__init__()
        self.heads = heads
        self.head_dim = head_dim
        self.window = tuple(window)
        self.to_v = nn.Linear(dim_in, heads * head_dim, bias=qkv_bias)
        self.to_out = nn.Linear(heads * head_dim, dim_out)
        self._position_table(bias_per_head=True)

    def kernel(self, window: tuple[int, int] | None = None) -> torch.Tensor:
        """(heads, N, N) attention rows shared by every window of every image."""
        return self.position_bias(window).float().softmax(dim=-1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        size = x.shape[-2:]
        window = self.window_for(size)
        maps = window_maps(x, window)
        b, n = maps.shape[0], window[0] * window[1]
        v = self._heads(F.conv2d(maps, self.to_v.weight[..., None, None], self.to_v.bias), b, n, 1)[0]
        out = self.kernel(window).to(v.dtype) @ v  # (heads, N, N) broadcast over windows
        return self._merged(out, maps, self.to_out, size)

    @torch.no_grad()
    def attention_map(self, x: torch.Tensor) -> torch.Tensor:
        """The kernel for every window of ``x``: (B * num_windows, heads, N, N), identical rows across images."""
        tokens, window = self._windows(x)
        n = window[0] * window[1]
        return self.kernel(window).expand(tokens.shape[0], self.heads, n, n)


class FocusedLinearAttention(_Projections):
    """Focused linear attention (FLatten Transformer) over all tokens of the map.

    phi(x) = ReLU(x) / softplus(s) focused by ``x -> |x| * x**p / |x**p|`` (p=3), then
    out_i = phi(q_i) . (sum_j phi(k_j) v_j^T) / (phi(q_i) . sum_j phi(k_j)), plus a depthwise
    conv on V. Both sums are taken as means (scaled by 1/N) so that they stay finite in fp16/bf16.
    As in FLatten, the focusing norm spans all heads' channels, so a head whose query is entirely
    negative gets q ~ 0 and, through the eps of the normaliser, contributes only its depthwise branch.
    As in FLatten-Swin, the keys get a learned positional encoding, one vector per token (zero at
    initialisation, so a new model starts position-free), and the q/k/v projections a bias (``qkv_bias``).
    """

    def __init__(
        self,
        dim_in: int,
        dim_out: int,
        *,
        heads: int,
        head_dim: int = 64,
        tokens: int,
        qkv_bias: bool = True,
        focusing_factor: float = 3.0,
        kernel_size: int = 5,
        eps: float = 1e-6,
    ):
        super().__init__(dim_in, dim_out, heads, head_dim, qkv_bias)
        self.focusing_factor = focusing_factor
        self.eps = eps
        self.scale = nn.Parameter(torch.zeros(1, 1, heads * head_dim))
        self.positional_encoding = nn.Parameter(torch.zeros(1, tokens, heads * head_dim))
        self.dwc = nn.Conv2d(head_dim, head_dim, kernel_size, padding=kernel_size // 2, groups=head_dim)

    def _focus(self, t: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        t = (F.relu(t.float()) + self.eps) / scale
        norm = t.norm(dim=-1, keepdim=True)
        t = t**self.focusing_factor
        return t / t.norm(dim=-1, keepdim=True) * norm

    def _features(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        b, _, h, w = x.shape
        tokens = x.flatten(2).transpose(1, 2)
        n = h * w
        q = self.to_q(tokens)
        k, v = self.to_kv(tokens).chunk(2, dim=-1)
        if n != self.positional_encoding.shape[1]:
            raise ValueError(
                f"focused linear attention was built for {self.positional_encoding.shape[1]} tokens (its positional "
                f"encoding) but got a {h}x{w} map ({n} tokens): build the model at this input size (img_size)"
            )
        k = k + self.positional_encoding.to(k.dtype)
        scale = F.softplus(self.scale.float())
        q, k = self._focus(q, scale), self._focus(k, scale)
        q, k = (t.reshape(b, n, self.heads, self.head_dim).transpose(1, 2) for t in (q, k))
        v = v.reshape(b, n, self.heads, self.head_dim).transpose(1, 2)
        return q, k, v

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, _, h, w = x.shape
        n = h * w
        q, k, v = self._features(x)
        k_mean = k.mean(dim=2, keepdim=True)  # (B, heads, 1, d)
        z = 1.0 / ((q * k_mean).sum(dim=-1, keepdim=True) + self.eps)  # (B, heads, N, 1)
        inv_sqrt_n = 1.0 / math.sqrt(n)
        kv = (k.transpose(-2, -1) * inv_sqrt_n).to(v.dtype) @ (v * inv_sqrt_n)  # mean over tokens
        out = (q.to(v.dtype) @ kv) * z.to(v.dtype)
        local = self.dwc(v.transpose(-2, -1).reshape(b * self.heads, self.head_dim, h, w))
        out = out + local.reshape(b, self.heads, self.head_dim, n).transpose(-2, -1)
        out = self.merge_heads(out)
        return out.transpose(1, 2).reshape(b, -1, h, w)

    @torch.no_grad()
    def attention_map(self, x: torch.Tensor) -> torch.Tensor:
        """The implied attention map (B, heads, N, N): phi(q_i).phi(k_j) normalised over j."""
        q, k, _ = self._features(x)
        scores = q @ k.transpose(-2, -1)
        return scores / scores.sum(dim=-1, keepdim=True)


def build_attention(
    kind: str,
    dim_in: int,
    dim_out: int,
    *,
    heads: int,
    head_dim: int,
    window: tuple[int, int],
    bias_per_head: bool = False,
    fused: bool | None = None,
    qkv_bias: bool | None = None,
) -> nn.Module:
    """One constructor for every kind; ``window`` is the stage's window (the whole map for ``global`` and
    ``focused_linear``); ``qkv_bias=None`` is the kind's own default (:data:`QKV_BIAS_DEFAULT`). ``kind`` is one
    of :data:`ATTENTION_KINDS`, checked by the backbone's constructor (:func:`check_attention`)."""
    bias = QKV_BIAS_DEFAULT[kind] if qkv_bias is None else bool(qkv_bias)
    common = dict(heads=heads, head_dim=head_dim, qkv_bias=bias)
    if kind == "position_only":
        check_attention(kind, bias_per_head=bias_per_head)
        return PositionOnlyAttention(dim_in, dim_out, window=window, **common)
    if kind in ("window", "global"):
        return WindowAttention(dim_in, dim_out, window=window, bias_per_head=bias_per_head, fused=fused, **common)
    return FocusedLinearAttention(dim_in, dim_out, tokens=window[0] * window[1], **common)  # focused_linear
