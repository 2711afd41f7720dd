"""The Durable Functions part of the host double, kept in the storage account the way the Azure Storage
backend (DurableTask.AzureStorage) keeps it: see ``README.md`` one folder up, section "Durable state"."""
