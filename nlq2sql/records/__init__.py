"""The run record: manifest, records and summary as written and read (the ground floor above errors/paths/inputs)."""

__all__: list[str] = []
