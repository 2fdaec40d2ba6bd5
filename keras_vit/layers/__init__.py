"""keras_vit layers, one paper concept per module."""

from keras_vit.layers.attention import MultiHeadSelfAttention
from keras_vit.layers.class_token import ClassToken
from keras_vit.layers.encoder import Encoder
from keras_vit.layers.encoder_block import EncoderBlock
from keras_vit.layers.mlp import MlpBlock
from keras_vit.layers.patch_embedding import PatchEmbedding
from keras_vit.layers.pooling import TokenPooling
from keras_vit.layers.position_embedding import PositionEmbedding, resize_position_embedding

__all__ = [
    "ClassToken", "Encoder", "EncoderBlock", "MlpBlock", "MultiHeadSelfAttention",
    "PatchEmbedding", "PositionEmbedding", "TokenPooling", "resize_position_embedding",
]
