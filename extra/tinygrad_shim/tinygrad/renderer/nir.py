"""tinygrad.renderer.nir: tinygrad's NIR (Mesa) renderer, which lazytensor does not have: no device renders with it."""

class NIRRenderer:
  """Stands for tinygrad's NIR renderer in `isinstance(Device[d].renderer, NIRRenderer)`, which is False here."""
