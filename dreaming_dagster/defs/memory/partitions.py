import dagster as dg

# One partition per user id; added by the pending-pairs sensor (or the demo) as users appear.
users_partitions = dg.DynamicPartitionsDefinition(name="users")
