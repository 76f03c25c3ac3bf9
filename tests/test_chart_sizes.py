"""The pages' charts stay small as the docs store them: PNG at twice the figure's dpi (execnb's
'retina'), cropped tight. A palette PNG keeps them at about a third of a full-colour one."""
import io
from IPython.core.pylabtools import print_figure
from PIL import Image

from colab_t4_nb.allocation import reading
from colab_t4_nb.benchmarks import GUIDE, plot_suite
from colab_t4_nb.monitoring import plot_samples, read_csv

def stored(fig)->bytes: return print_figure(fig, 'retina', bbox_inches='tight')

def test_charts_as_the_pages_store_them():
    suite = stored(plot_suite(GUIDE))  # 48.6 kB measured; 161.6 kB before
    samples = stored(plot_samples(read_csv(io.StringIO(reading('h200_monitor_train.csv'))), 'H200'))
    assert (len(suite) < 70_000, len(samples) < 100_000) == (True, True), (len(suite), len(samples))
    assert Image.open(io.BytesIO(suite)).mode == 'P'

def test_a_transparent_chart_keeps_its_colours():
    png = io.BytesIO()
    plot_suite(GUIDE).savefig(png, format='png', transparent=True)
    assert Image.open(png).mode == 'RGBA'
