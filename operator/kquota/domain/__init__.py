"""Pure quota logic: entities, effective-quota resolution, planning. No I/O."""
