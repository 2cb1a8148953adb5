"""The CIFAR-10 zoo's architectures (PyTorch), built from a few block kinds so that export.py can
write every one as a Keras twin for the TensorFlow Lite converter. Imported by train.py and export.py
(never by qverify). Input: NCHW float32 (1, 3, 32, 32), pixel levels / 255 in [0, 1] (no mean/std
normalisation: the first convolution and its BatchNorm absorb it); output: 10 logits (or, with
`softmax`, the probabilities) in CIFAR-10's class order.

Every network is an `nn.Sequential` of these blocks (export.py walks it):

- `ConvBN`: Conv2d (bias-free when followed by BN) -> BatchNorm2d (optional) -> ReLU / ReLU6 / none;
  `groups == channels` is a depthwise convolution.
- `BasicBlock`: ResNet's two 3x3 ConvBN with the residual Add before the last ReLU; the shortcut is
  the identity or a 1x1 ConvBN (stride 2 or a change of width).
- `InvertedResidual`: MobileNetV2's 1x1 expand (ReLU6) -> 3x3 depthwise (ReLU6) -> 1x1 project
  (linear), with the residual Add when stride 1 and in == out.
- `Fire`: SqueezeNet's 1x1 squeeze (ReLU) -> 1x1 and 3x3 expands (ReLU each) joined by Concat
  (channel axis: the 1x1 expand's channels first).
- nn.MaxPool2d, nn.AdaptiveAvgPool2d(1) (exported as GlobalAveragePool), nn.Flatten, nn.Linear,
  nn.ReLU, nn.Softmax(dim=1).

The families (widths below; README.md gives the parameter counts):

| name | for | what |
|---|---|---|
| lenet5 | issue 44 (DiffChaser) | LeNet-5: conv 6x5x5, maxpool, conv 16x5x5, maxpool, dense 120, 84, 10 |
| resnet20 | issue 44 (DiffChaser) | He et al.'s CIFAR ResNet-20 (16-32-64, 3x3 basic blocks), 1x1-conv shortcuts, GAP head; BN kept |
| vgg16 | issue 44 (perturbation study, QNNRepair) | VGG-16's 13 conv layers at 1/4 width (16-32-64-128-128), BN, three dense layers 128-64-64-10 |
| resnet18 | issue 44 (perturbation study, QNNRepair) | CIFAR ResNet-18 ([2,2,2,2] basic blocks) at 1/4 width (16-32-64-128), GAP, dense 64-64-10 |
| mobilenetv2 | issue 44 (QNNRepair) | MobileNetV2's 17 inverted residual blocks at width 0.25, stem stride 2, last conv 320, GAP |
| resnet2b | issue 41 suite | stem conv 8 /2, identity block 8, 1x1-shortcut block 8->16 /2, dense 1024->10 |
| resnet4b | issue 41 suite | stem conv 16 /2, identity, 1x1-shortcut /2, identity, identity blocks (16 channels), GAP, dense 10; BN kept |
| mbv2s | issue 41 suite | stem conv 8 /2 ReLU6, inverted residuals 8->16->8 (Add), 8->16->16 /2, 16->16->16 (Add), dense 1024->10 |
| squeeze | issue 41 suite | stem conv 16 /2, maxpool, two fire modules (squeeze 4, expand 8+8 -> Concat 16), conv 1x1 10, GAP |
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

Activation = str  # "relu", "relu6" or "none"


class ConvBN(nn.Sequential):
    def __init__(
        self,
        cin: int,
        cout: int,
        kernel: int,
        stride: int = 1,
        groups: int = 1,
        act: Activation = "relu",
        bn: bool = True,
    ) -> None:
        layers: list[nn.Module] = [
            nn.Conv2d(cin, cout, kernel, stride, kernel // 2, groups=groups, bias=not bn)
        ]
        if bn:
            layers.append(nn.BatchNorm2d(cout))
        if act == "relu":
            layers.append(nn.ReLU())
        elif act == "relu6":
            layers.append(nn.ReLU6())
        super().__init__(*layers)
        self.act = act

    @property
    def conv(self) -> nn.Conv2d:
        return self[0]

    @property
    def bn(self) -> nn.BatchNorm2d | None:
        return self[1] if len(self) > 1 and isinstance(self[1], nn.BatchNorm2d) else None


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int = 1, bn: bool = True) -> None:
        super().__init__()
        self.conv1 = ConvBN(cin, cout, 3, stride, bn=bn)
        self.conv2 = ConvBN(cout, cout, 3, 1, act="none", bn=bn)
        self.shortcut = (
            ConvBN(cin, cout, 1, stride, act="none", bn=bn) if stride != 1 or cin != cout else nn.Identity()
        )
        self.relu = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.relu(self.conv2(self.conv1(x)) + self.shortcut(x))


class InvertedResidual(nn.Module):
    def __init__(self, cin: int, cout: int, expand: int, stride: int) -> None:
        super().__init__()
        hidden = cin * expand
        self.expand = ConvBN(cin, hidden, 1, act="relu6")
        self.depthwise = ConvBN(hidden, hidden, 3, stride, groups=hidden, act="relu6")
        self.project = ConvBN(hidden, cout, 1, act="none")
        self.residual = stride == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.project(self.depthwise(self.expand(x)))
        return x + y if self.residual else y


class Fire(nn.Module):
    def __init__(self, cin: int, squeeze: int, expand1: int, expand3: int) -> None:
        super().__init__()
        self.squeeze = ConvBN(cin, squeeze, 1)
        self.expand1 = ConvBN(squeeze, expand1, 1)
        self.expand3 = ConvBN(squeeze, expand3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = self.squeeze(x)
        return torch.cat([self.expand1(s), self.expand3(s)], dim=1)


def lenet5() -> nn.Sequential:
    return nn.Sequential(
        ConvBN(3, 6, 5, bn=False),  # padding 2 keeps 32x32 (kernel // 2)
        nn.MaxPool2d(2),
        ConvBN(6, 16, 5, bn=False),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(16 * 8 * 8, 120),
        nn.ReLU(),
        nn.Linear(120, 84),
        nn.ReLU(),
        nn.Linear(84, 10),
    )


def _resnet(widths: tuple[int, ...], blocks: tuple[int, ...], head: list[nn.Module]) -> nn.Sequential:
    layers: list[nn.Module] = [ConvBN(3, widths[0], 3)]
    cin = widths[0]
    for stage, (width, count) in enumerate(zip(widths, blocks)):
        for index in range(count):
            stride = 2 if stage > 0 and index == 0 else 1
            layers.append(BasicBlock(cin, width, stride))
            cin = width
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), *head)


def resnet20() -> nn.Sequential:
    return _resnet((16, 32, 64), (3, 3, 3), [nn.Linear(64, 10)])


def resnet18() -> nn.Sequential:
    head = [nn.Linear(128, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10)]
    return _resnet((16, 32, 64, 128), (2, 2, 2, 2), head)


def vgg16() -> nn.Sequential:
    config = (16, 16, "M", 32, 32, "M", 64, 64, 64, "M", 128, 128, 128, "M", 128, 128, 128, "M")
    layers: list[nn.Module] = []
    cin = 3
    for item in config:
        if item == "M":
            layers.append(nn.MaxPool2d(2))
        else:
            layers.append(ConvBN(cin, int(item), 3))
            cin = int(item)
    head = [nn.Flatten(), nn.Linear(128, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10)]
    return nn.Sequential(*layers, *head)


def mobilenetv2() -> nn.Sequential:
    # (expansion, output channels, blocks, first stride): MobileNetV2's table (17 blocks) at width
    # 0.25 (channels rounded up to 8), stem stride 2 as on ImageNet (32x32 -> 16 -> 8 -> 4 -> 2)
    settings = (
        (1, 8, 1, 1),
        (6, 8, 2, 1),
        (6, 8, 3, 2),
        (6, 16, 4, 2),
        (6, 24, 3, 1),
        (6, 40, 3, 2),
        (6, 80, 1, 1),
    )
    layers: list[nn.Module] = [ConvBN(3, 8, 3, 2, act="relu6")]
    cin = 8
    for expand, cout, count, stride in settings:
        for index in range(count):
            layers.append(InvertedResidual(cin, cout, expand, stride if index == 0 else 1))
            cin = cout
    layers += [ConvBN(cin, 320, 1, act="relu6"), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(320, 10)]
    return nn.Sequential(*layers)


def resnet2b() -> nn.Sequential:
    return nn.Sequential(
        ConvBN(3, 8, 3, 2),
        BasicBlock(8, 8),
        BasicBlock(8, 16, 2),
        nn.Flatten(),
        nn.Linear(16 * 8 * 8, 10),
    )


def resnet4b() -> nn.Sequential:
    return nn.Sequential(
        ConvBN(3, 16, 3, 2),
        BasicBlock(16, 16),
        BasicBlock(16, 16, 2),
        BasicBlock(16, 16),
        BasicBlock(16, 16),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(16, 10),
    )


def mbv2s() -> nn.Sequential:
    return nn.Sequential(
        ConvBN(3, 8, 3, 2, act="relu6"),
        InvertedResidual(8, 8, 2, 1),
        InvertedResidual(8, 16, 2, 2),
        InvertedResidual(16, 16, 1, 1),
        nn.Flatten(),
        nn.Linear(16 * 8 * 8, 10),
    )


def squeeze() -> nn.Sequential:
    return nn.Sequential(
        ConvBN(3, 16, 3, 2),
        nn.MaxPool2d(2),
        Fire(16, 4, 8, 8),
        Fire(16, 4, 8, 8),
        ConvBN(16, 10, 1, act="none", bn=False),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
    )


FAMILIES: dict[str, Callable[[], nn.Sequential]] = {
    "lenet5": lenet5,
    "resnet20": resnet20,
    "vgg16": vgg16,
    "resnet18": resnet18,
    "mobilenetv2": mobilenetv2,
    "resnet2b": resnet2b,
    "resnet4b": resnet4b,
    "mbv2s": mbv2s,
    "squeeze": squeeze,
}


def parameter_count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
