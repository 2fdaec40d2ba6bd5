"""keras_vit layers, one paper concept per module."""

from keras_vit.layers.attention import MultiHeadSelfAttention
from keras_vit.layers.attention_pooling import MultiHeadAttentionPooling
from keras_vit.layers.class_token import ClassToken
from keras_vit.layers.encoder import Encoder
from keras_vit.layers.encoder_block import EncoderBlock
from keras_vit.layers.layer_scale import LayerScale
from keras_vit.layers.mlp import MlpBlock
from keras_vit.layers.patch_corruption import PatchCorruption
from keras_vit.layers.patch_embedding import PatchEmbedding, PatchTokenMap
from keras_vit.layers.pooling import TokenPooling
from keras_vit.layers.position_embedding import PositionEmbedding, resize_position_embedding
from keras_vit.layers.register_tokens import RegisterTokens
from keras_vit.layers.resnet import BottleneckUnit, ResNetStage, ResNetStem
from keras_vit.layers.rotary import RotaryPositionEmbedding
from keras_vit.layers.std_conv import StdConv2D
from keras_vit.layers.stochastic_depth import StochasticDepth

__all__ = [
    "BottleneckUnit",
    "ClassToken",
    "Encoder",
    "EncoderBlock",
    "LayerScale",
    "MlpBlock",
    "MultiHeadAttentionPooling",
    "MultiHeadSelfAttention",
    "PatchCorruption",
    "PatchEmbedding",
    "PatchTokenMap",
    "PositionEmbedding",
    "RegisterTokens",
    "ResNetStage",
    "ResNetStem",
    "RotaryPositionEmbedding",
    "StdConv2D",
    "StochasticDepth",
    "TokenPooling",
    "resize_position_embedding",
]
