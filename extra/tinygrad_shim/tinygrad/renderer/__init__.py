"""tinygrad.renderer: tinygrad's renderer classes, for the isinstance checks its tests make on Device[...].renderer."""
