from django.contrib import admin

from portal.catalog.models import HardwareType, Preset, Software


@admin.register(HardwareType)
class HardwareTypeAdmin(admin.ModelAdmin):
    list_display = ["slug", "name", "cluster", "gpu_model", "gpus_per_node", "max_nodes", "rate", "rate_unit", "enabled"]
    list_filter = ["cluster", "gpu_model", "enabled"]
    search_fields = ["slug", "name"]


@admin.register(Software)
class SoftwareAdmin(admin.ModelAdmin):
    list_display = ["slug", "name", "kind", "image", "enabled"]
    list_filter = ["kind", "enabled"]
    filter_horizontal = ["clusters", "projects"]
    search_fields = ["slug", "name"]


@admin.register(Preset)
class PresetAdmin(admin.ModelAdmin):
    list_display = ["label", "gpu_model", "gpus_per_node", "nodes", "order"]
