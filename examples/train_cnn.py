"""Training a small residual CNN with BatchNorm: convolutions (library calls with their own
backward), BatchNorm in training mode (batch statistics, running statistics updated once
per step, as in eager), ReLU, pooling and a classifier with the cross-entropy loss."""

import torch
import torch.nn as nn
import torch.nn.functional as F

import compiler


class BasicBlock(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + x)


class SmallResNet(nn.Module):
    def __init__(self, channels=16, classes=10):
        super().__init__()
        self.stem = nn.Conv2d(3, channels, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(channels)
        self.blocks = nn.Sequential(BasicBlock(channels), BasicBlock(channels))
        self.fc = nn.Linear(channels, classes)

    def forward(self, images, labels):
        x = F.relu(self.bn(self.stem(images)))
        x = self.blocks(x)
        x = F.adaptive_avg_pool2d(x, 1).flatten(1)
        return F.cross_entropy(self.fc(x), labels)


@compiler.example(train=True)
def cnn_loss_example():
    model = SmallResNet().train()
    return model, (torch.randn(8, 3, 16, 16), torch.randint(0, 10, (8,)))
