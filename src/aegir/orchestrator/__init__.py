"""Phase 3's model: the trainable primary, its router, the frozen specialists and the state fusion."""
