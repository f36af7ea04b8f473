import dagster as dg

# One partition per user id; added by the sensors (or the demo) as users appear.
users_partitions = dg.DynamicPartitionsDefinition(name="users")


def add_new_users(instance: dg.DagsterInstance, user_ids) -> list[dg.AddDynamicPartitionsRequest]:
    """The request that registers, as ``users`` partitions, those of ``user_ids`` the instance lacks."""
    known = set(instance.get_dynamic_partitions(users_partitions.name))
    new_users = [user for user in dict.fromkeys(user_ids) if user not in known]
    return [users_partitions.build_add_request(new_users)] if new_users else []
