"""ResNet (He et al. 2015) for lazytensor, laid out as torchvision's: the same attribute names (conv1, bn1, layer1..4,
fc, downsample.0/1), so that a torchvision state dict maps onto it name for name. The stride of a bottleneck block is
on its 3x3 convolution (torchvision's "ResNet v1.5"). `width` scales every stage's channels (64 is the real model; a
smaller one makes a tiny ResNet of the same shape for tests).
"""
from __future__ import annotations

from lazytensor import Tensor, nn


class BasicBlock:
  """Two 3x3 convolutions and a shortcut (ResNet18/34)."""
  expansion = 1

  def __init__(self, cin: int, planes: int, stride: int) -> None:
    self.conv1, self.bn1 = nn.Conv2d(cin, planes, 3, stride, 1, bias=False), nn.BatchNorm2d(planes)
    self.conv2, self.bn2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False), nn.BatchNorm2d(planes)
    self.downsample = shortcut(cin, planes * self.expansion, stride)

  def __call__(self, x: Tensor) -> Tensor:
    out = self.bn2(self.conv2(self.bn1(self.conv1(x)).relu()))
    return (out + x.sequential(self.downsample)).relu()

class Bottleneck:
  """1x1 down, 3x3 (strided), 1x1 up to 4x the planes, and a shortcut (ResNet50/101/152)."""
  expansion = 4

  def __init__(self, cin: int, planes: int, stride: int) -> None:
    self.conv1, self.bn1 = nn.Conv2d(cin, planes, 1, bias=False), nn.BatchNorm2d(planes)
    self.conv2, self.bn2 = nn.Conv2d(planes, planes, 3, stride, 1, bias=False), nn.BatchNorm2d(planes)
    self.conv3 = nn.Conv2d(planes, planes * self.expansion, 1, bias=False)
    self.bn3 = nn.BatchNorm2d(planes * self.expansion)
    self.downsample = shortcut(cin, planes * self.expansion, stride)

  def __call__(self, x: Tensor) -> Tensor:
    out = self.bn2(self.conv2(self.bn1(self.conv1(x)).relu())).relu()
    return (self.bn3(self.conv3(out)) + x.sequential(self.downsample)).relu()

def shortcut(cin: int, cout: int, stride: int) -> list[nn.Conv2d | nn.BatchNorm]:
  """The identity where the shape is kept (no layers), else a strided 1x1 convolution and a batchnorm."""
  if stride == 1 and cin == cout: return []
  return [nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)]

class ResNet:
  def __init__(self, block: type[BasicBlock] | type[Bottleneck], depths: list[int], classes: int = 1000,
               width: int = 64) -> None:
    self.conv1, self.bn1 = nn.Conv2d(3, width, 7, 2, 3, bias=False), nn.BatchNorm2d(width)
    cin, stages = width, []
    for i, depth in enumerate(depths):
      planes, stage = width * 2 ** i, []
      for j in range(depth):
        stage.append(block(cin, planes, 2 if i > 0 and j == 0 else 1))
        cin = planes * block.expansion
      stages.append(stage)
    self.layer1, self.layer2, self.layer3, self.layer4 = stages
    self.fc = nn.Linear(cin, classes)

  def __call__(self, x: Tensor) -> Tensor:
    """Images (batch, 3, height, width) -> class logits (batch, classes)."""
    h = self.bn1(self.conv1(x)).relu().max_pool2d(3, 2, padding=1)
    assert isinstance(h, Tensor), "max_pool2d gives the pooled tensor alone without return_indices"
    for stage in (self.layer1, self.layer2, self.layer3, self.layer4): h = h.sequential(stage)
    return self.fc(h.mean((2, 3)))

def resnet18(classes: int = 1000, width: int = 64) -> ResNet: return ResNet(BasicBlock, [2, 2, 2, 2], classes, width)
def resnet50(classes: int = 1000, width: int = 64) -> ResNet: return ResNet(Bottleneck, [3, 4, 6, 3], classes, width)
