"""Layer tables of real networks: the shapes the tests, benchmarks and tuner use.

Each layer is given at its real size (ImageNet 224x224 input, torchvision's models);
``problems(suite, n, dtype, layout)`` turns a suite into ConvProblems, and
``scaled(layer, hw)`` shrinks its spatial size for the emulator while keeping its
channel structure (C, K, groups, filter, stride, padding).

3-D suites (video and volumetric networks: I3D, C3D, R(2+1)D, 3-D U-Net) are layers with
a ``depth`` (input frames or slices) and a filter depth ``fd``; their problems are
NCDHW / NDHWC (a 2-D layout name asks for its 3-D counterpart, so one ``layout`` serves
every suite), and ``scaled`` shrinks the depth too.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from .conv import ConvProblem


@dataclass(frozen=True)
class ConvLayer:
    name: str
    c: int
    hw: int  # input height = width
    k: int
    f: int  # filter height = width
    stride: int = 1
    pad: int = 0
    groups: int = 1
    depth: int = 0  # 3-D layers: input depth (frames, slices); 0 for 2-D
    fd: int = 1  # 3-D: filter depth
    stride_d: int = 1
    pad_d: int = 0

    def problem(self, n: int = 1, dtype: str = "fp32", layout: str = "NCHW") -> ConvProblem:
        if self.depth:
            return ConvProblem(
                n=n,
                c=self.c,
                spatial=(self.depth, self.hw, self.hw),
                k=self.k,
                filter=(self.fd, self.f, self.f),
                pads=((self.pad_d, self.pad_d), (self.pad, self.pad), (self.pad, self.pad)),
                strides=(self.stride_d, self.stride, self.stride),
                dilations=(1, 1, 1),
                groups=self.groups,
                layout=_LAYOUTS_3D.get(layout, layout),
                dtype=dtype,
            )
        return ConvProblem(
            n=n,
            c=self.c,
            spatial=(self.hw, self.hw),
            k=self.k,
            filter=(self.f, self.f),
            pads=((self.pad, self.pad), (self.pad, self.pad)),
            strides=(self.stride, self.stride),
            dilations=(1, 1),
            groups=self.groups,
            layout=layout,
            dtype=dtype,
        )


def _l(name: str, c: int, hw: int, k: int, f: int, stride: int = 1, groups: int = 1) -> ConvLayer:
    return ConvLayer(name, c, hw, k, f, stride, f // 2, groups)


# Every distinct convolution of ResNet-50 (torchvision v1.5: stride on the 3x3).
RESNET50 = (
    _l("conv1", 3, 224, 64, 7, 2),
    _l("l1.conv1", 64, 56, 64, 1),
    _l("l1.conv2", 64, 56, 64, 3),
    _l("l1.conv3", 64, 56, 256, 1),
    _l("l1.down", 64, 56, 256, 1),
    _l("l1.b.conv1", 256, 56, 64, 1),
    _l("l2.conv1", 256, 56, 128, 1),
    _l("l2.conv2", 128, 56, 128, 3, 2),
    _l("l2.conv3", 128, 28, 512, 1),
    _l("l2.down", 256, 56, 512, 1, 2),
    _l("l2.b.conv1", 512, 28, 128, 1),
    _l("l2.b.conv2", 128, 28, 128, 3),
    _l("l3.conv1", 512, 28, 256, 1),
    _l("l3.conv2", 256, 28, 256, 3, 2),
    _l("l3.conv3", 256, 14, 1024, 1),
    _l("l3.down", 512, 28, 1024, 1, 2),
    _l("l3.b.conv1", 1024, 14, 256, 1),
    _l("l3.b.conv2", 256, 14, 256, 3),
    _l("l4.conv1", 1024, 14, 512, 1),
    _l("l4.conv2", 512, 14, 512, 3, 2),
    _l("l4.conv3", 512, 7, 2048, 1),
    _l("l4.down", 1024, 14, 2048, 1, 2),
    _l("l4.b.conv1", 2048, 7, 512, 1),
    _l("l4.b.conv2", 512, 7, 512, 3),
)

# The 3x3 convolutions of VGG-16 (distinct shapes).
VGG16 = (
    _l("conv1_1", 3, 224, 64, 3),
    _l("conv1_2", 64, 224, 64, 3),
    _l("conv2_1", 64, 112, 128, 3),
    _l("conv2_2", 128, 112, 128, 3),
    _l("conv3_1", 128, 56, 256, 3),
    _l("conv3_2", 256, 56, 256, 3),
    _l("conv4_1", 256, 28, 512, 3),
    _l("conv4_2", 512, 28, 512, 3),
    _l("conv5_1", 512, 14, 512, 3),
)

# MobileNetV2: the stem, every distinct depthwise 3x3 and pointwise 1x1.
MOBILENETV2 = (
    _l("stem", 3, 224, 32, 3, 2),
    _l("dw32", 32, 112, 32, 3, 1, 32),
    _l("dw96.s2", 96, 112, 96, 3, 2, 96),
    _l("dw144", 144, 56, 144, 3, 1, 144),
    _l("dw144.s2", 144, 56, 144, 3, 2, 144),
    _l("dw192", 192, 28, 192, 3, 1, 192),
    _l("dw192.s2", 192, 28, 192, 3, 2, 192),
    _l("dw384", 384, 14, 384, 3, 1, 384),
    _l("dw576", 576, 14, 576, 3, 1, 576),
    _l("dw576.s2", 576, 14, 576, 3, 2, 576),
    _l("dw960", 960, 7, 960, 3, 1, 960),
    _l("pw32-16", 32, 112, 16, 1),
    _l("pw16-96", 16, 112, 96, 1),
    _l("pw96-24", 96, 56, 24, 1),
    _l("pw24-144", 24, 56, 144, 1),
    _l("pw144-24", 144, 56, 24, 1),
    _l("pw144-32", 144, 28, 32, 1),
    _l("pw32-192", 32, 28, 192, 1),
    _l("pw192-32", 192, 28, 32, 1),
    _l("pw192-64", 192, 14, 64, 1),
    _l("pw64-384", 64, 14, 384, 1),
    _l("pw384-64", 384, 14, 64, 1),
    _l("pw384-96", 384, 14, 96, 1),
    _l("pw96-576", 96, 14, 576, 1),
    _l("pw576-96", 576, 14, 96, 1),
    _l("pw576-160", 576, 7, 160, 1),
    _l("pw160-960", 160, 7, 960, 1),
    _l("pw960-160", 960, 7, 160, 1),
    _l("pw960-320", 960, 7, 320, 1),
    _l("pw320-1280", 320, 7, 1280, 1),
)

# ResNeXt-50 (32x4d): its grouped 3x3 convolutions, 32 groups of 4 to 32 channels (the 1x1
# layers are ResNet-50's shapes at twice the width); stride on the first block's 3x3.
RESNEXT50 = (
    _l("l1.conv2", 128, 56, 128, 3, 1, 32),
    _l("l2.conv2", 256, 56, 256, 3, 2, 32),
    _l("l2.b.conv2", 256, 28, 256, 3, 1, 32),
    _l("l3.conv2", 512, 28, 512, 3, 2, 32),
    _l("l3.b.conv2", 512, 14, 512, 3, 1, 32),
    _l("l4.conv2", 1024, 14, 1024, 3, 2, 32),
    _l("l4.b.conv2", 1024, 7, 1024, 3, 1, 32),
)

_LAYOUTS_3D = {"NCHW": "NCDHW", "NHWC": "NDHWC"}


def _v(name: str, c: int, depth: int, hw: int, k: int, fd: int, f: int, stride_d: int = 1,
       stride: int = 1) -> ConvLayer:  # fmt: skip
    """A 3-D layer, 'same'-style padding (filter // 2) in every dim."""
    return ConvLayer(name, c, hw, k, f, stride, f // 2, 1, depth, fd, stride_d, fd // 2)


# I3D (Inflated Inception-V1, 64 frames of 224x224): the stem, the 3x3x3 of conv3, and the
# Inception branches' 1x1x1 and 3x3x3 convolutions at each resolution.
I3D = (
    _v("conv1", 3, 64, 224, 64, 7, 7, 2, 2),
    _v("conv2.1x1", 64, 32, 56, 64, 1, 1),
    _v("conv3", 64, 32, 56, 192, 3, 3),
    _v("mix3b.1x1", 192, 32, 28, 64, 1, 1),
    _v("mix3b.3x3", 96, 32, 28, 128, 3, 3),
    _v("mix3b.3x3s", 16, 32, 28, 32, 3, 3),
    _v("mix4b.3x3", 96, 16, 14, 208, 3, 3),
    _v("mix5b.3x3", 160, 8, 7, 320, 3, 3),
)

# C3D (16 frames of 112x112): every 3x3x3 convolution (pools between them).
C3D = (
    _v("conv1a", 3, 16, 112, 64, 3, 3),
    _v("conv2a", 64, 16, 56, 128, 3, 3),
    _v("conv3a", 128, 8, 28, 256, 3, 3),
    _v("conv3b", 256, 8, 28, 256, 3, 3),
    _v("conv4a", 256, 4, 14, 512, 3, 3),
    _v("conv5a", 512, 2, 7, 512, 3, 3),
)

# R(2+1)D-18 (16 frames of 112x112): factorized 3x3x3 as a 1x3x3 spatial then a 3x1x1
# temporal convolution (the stem and the first block of each stage; stride 2 from stage 3).
R2PLUS1D = (
    _v("stem.s", 3, 16, 112, 45, 1, 7, 1, 2),
    _v("stem.t", 45, 16, 56, 64, 3, 1),
    _v("l1.s", 64, 16, 56, 144, 1, 3),
    _v("l1.t", 144, 16, 56, 64, 3, 1),
    _v("l2.s", 64, 16, 56, 230, 1, 3, 1, 2),
    _v("l2.t", 230, 16, 28, 128, 3, 1, 2, 1),
    _v("l3.s", 128, 8, 28, 460, 1, 3, 1, 2),
    _v("l3.t", 460, 8, 14, 256, 3, 1, 2, 1),
)

# 3-D U-Net (nnU-Net style, 128^3 one-channel volume): encoder 3x3x3 pairs, stride-2
# downsampling convolutions, decoder 3x3x3 convolutions after the skip concatenation (the
# 2x2x2 stride-2 upsampling is a conv_transpose3d: a backward data problem).
UNET3D = (
    _v("enc1.a", 1, 128, 128, 32, 3, 3),
    _v("enc1.b", 32, 128, 128, 32, 3, 3),
    _v("down2", 32, 128, 128, 64, 3, 3, 2, 2),
    _v("enc2.b", 64, 64, 64, 64, 3, 3),
    _v("down3", 64, 64, 64, 128, 3, 3, 2, 2),
    _v("down4", 128, 32, 32, 256, 3, 3, 2, 2),
    _v("bottom", 256, 16, 16, 320, 3, 3, 2, 2),
    _v("dec4", 512, 16, 16, 256, 3, 3),
    _v("dec3", 256, 32, 32, 128, 3, 3),
    _v("dec2", 128, 64, 64, 64, 3, 3),
    _v("dec1", 64, 128, 128, 32, 3, 3),
)

SUITES_2D = {"resnet50": RESNET50, "vgg16": VGG16, "mobilenetv2": MOBILENETV2,
             "resnext50": RESNEXT50}  # fmt: skip
SUITES_3D = {"i3d": I3D, "c3d": C3D, "r2plus1d": R2PLUS1D, "unet3d": UNET3D}
SUITES = {**SUITES_2D, **SUITES_3D}


def scaled(layer: ConvLayer, hw: int) -> ConvLayer:
    """The layer on an hw x hw input (at least the filter's size), channels unchanged; a
    3-D layer's depth shrinks to at most hw as well (at least its filter depth)."""
    out = replace(layer, hw=max(min(layer.hw, hw), layer.f))
    if layer.depth:
        out = replace(out, depth=max(min(layer.depth, hw), layer.fd))
    return out


def problems(
    suite: str, n: int = 1, dtype: str = "fp32", layout: str = "NCHW", hw: int | None = None
) -> list[ConvProblem]:
    layers = SUITES[suite]
    if hw is not None:
        layers = tuple(scaled(layer, hw) for layer in layers)
    return [layer.problem(n, dtype, layout) for layer in layers]
