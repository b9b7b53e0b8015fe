"""Inlet services: cdc_consumer, coordinator, writer, catalog_sync, table_services, cli."""
