from django.contrib import admin

from portal.catalog import prices
from portal.catalog.models import CloudPrice, HardwareType, Preset, Software
from portal.clusters.connect import is_cloud


@admin.register(HardwareType)
class HardwareTypeAdmin(admin.ModelAdmin):
    list_display = ["slug", "name", "cluster", "gpu_model", "gpus_per_node", "max_nodes", "rate", "rate_unit", "enabled"]
    list_filter = ["cluster", "gpu_model", "enabled"]
    search_fields = ["slug", "name"]

    def get_readonly_fields(self, request, obj=None):
        # A cloud hardware type's rate is the price table's (Cloud prices), kept in step whenever either changes.
        if obj is not None and is_cloud(obj.cluster):
            return ["rate", "rate_unit"]
        return []

    def save_model(self, request, obj, form, change):
        super().save_model(request, obj, form, change)
        prices.apply_prices(actor=request.user)


@admin.register(Software)
class SoftwareAdmin(admin.ModelAdmin):
    list_display = ["slug", "name", "kind", "image", "provides", "enabled"]
    list_filter = ["kind", "enabled"]
    filter_horizontal = ["clusters", "projects"]
    search_fields = ["slug", "name"]


@admin.register(Preset)
class PresetAdmin(admin.ModelAdmin):
    list_display = ["label", "gpu_model", "gpus_per_node", "nodes", "order"]


@admin.register(CloudPrice)
class CloudPriceAdmin(admin.ModelAdmin):
    """The cloud price table: a change here is the rate of every matching AWS hardware type from now on."""

    list_display = ["instance_type", "market", "region", "price_per_hour", "currency", "source", "updated_at"]
    list_filter = ["region", "market"]
    search_fields = ["instance_type"]
    readonly_fields = ["source", "updated_at"]

    def save_model(self, request, obj, form, change):
        obj.source = f"site admin {request.user}"
        super().save_model(request, obj, form, change)
        prices.apply_prices(actor=request.user)
